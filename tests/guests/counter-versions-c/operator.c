// Two versions of a keyed word counter in C, for tests/upgrades.rs: the state "count" changes
// shape between them, and version 2 declares it and migrates version 1's values.
//
// With config `{ role = "count-v1" }`: the count is stored as `{"count":N}` (version 1, plain
// JSON text) and each record emits `word<TAB>N`. With `{ role = "count-v2" }`: stored as
// version 2, `{"total":N,"last_seen":"word"}`, wrapped with weir_buf_begin_versioned; a
// version-1 value read is migrated (total = count) and written back; each record emits
// `word<TAB>N<TAB>last_seen`. weir_read_versioned calls the migration; the host hands values
// back as the JSON it was given, key order kept, so reading them needs no JSON parser beyond
// fixed prefixes.

#include "weir.h"

static weir_operator_state_state_id_t count_state;
static bool version_2;
// Per key slot of the current batch: the running count, and whether it changed.
static uint64_t *counts;
static uint8_t *dirty;
static size_t slots_cap;

static bool count_open(const weir_context_t *ctx, operator_string_t *err) {
  const char *config = (const char *)ctx->config.ptr;
  size_t len = ctx->config.len;
  version_2 = false;
  for (size_t i = 0; i + 8 <= len; i++) {
    if (memcmp(config + i, "count-v2", 8) == 0) version_2 = true;
  }
  return weir_declare("count", WEIR_OPERATOR_STATE_STATE_KIND_VALUE, &count_state, err);
}

// The number after `prefix` at the start of `text`.
static bool number_after(const char *prefix, const uint8_t *text, size_t len, uint64_t *n) {
  size_t p = strlen(prefix);
  if (len < p || memcmp(text, prefix, p) != 0) return false;
  size_t digits = 0;
  while (p + digits < len && text[p + digits] >= '0' && text[p + digits] <= '9') digits++;
  return weir_parse_u64(text + p, digits, n);
}

// Version 1's `{"count":N}` as version 2's `{"total":N,"last_seen":""}`: the migration
// weir_read_versioned calls for a value of an older version.
static bool count_from_v1(uint64_t version, const uint8_t *value, size_t len, weir_buf_t *out,
                          operator_string_t *err) {
  uint64_t count;
  if (version != 1 || !number_after("{\"count\":", value, len, &count)) {
    return weir_fail(err, "no migration from version %llu of %.*s", (unsigned long long)version,
                     (int)len, (const char *)value);
  }
  weir_buf_append(out, "{\"total\":", 9);
  weir_buf_append_u64(out, count);
  weir_buf_append(out, ",\"last_seen\":\"\"}", 16);
  return true;
}

// The count a stored value holds, read at this operator's version (a version-1 value read in
// version 2 is migrated; every slot of a batch is written back, in this version, anyway).
static bool stored_count(const uint8_t *text, size_t len, uint64_t *count,
                         operator_string_t *err) {
  static weir_buf_t current;
  bool migrated;
  current.len = 0;
  if (!weir_read_versioned("count", text, len, version_2 ? 2 : 1, count_from_v1, &current,
                           &migrated, err)) {
    return false;
  }
  const char *prefix = version_2 ? "{\"total\":" : "{\"count\":";
  if (number_after(prefix, current.ptr, current.len, count)) return true;
  return weir_fail(err, "state `count`: %.*s is not a count", (int)len, (const char *)text);
}

static void append_json_string(weir_buf_t *buf, const uint8_t *text, size_t len) {
  weir_buf_push(buf, '"');
  for (size_t i = 0; i < len; i++) {
    uint8_t c = text[i];
    if (c == '"' || c == '\\') {
      weir_buf_push(buf, '\\');
      weir_buf_push(buf, c);
    } else if (c < 0x20) {
      static const char hex[] = "0123456789abcdef";
      const char escape[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
      weir_buf_append(buf, escape, sizeof escape);
    } else {
      weir_buf_push(buf, c);
    }
  }
  weir_buf_push(buf, '"');
}

static bool count_process(const weir_batch_t *batch, const weir_key_slots_t *key_slots,
                          uint32_t slot_count, weir_out_t *out, weir_ops_t *ops,
                          operator_string_t *err) {
  weir_grow((void **)&counts, &slots_cap, slot_count, sizeof(uint64_t));
  dirty = (uint8_t *)realloc(dirty, slots_cap ? slots_cap : 1);
  if (dirty == NULL) abort();
  if (slot_count > 0) {
    weir_operator_state_values_t values;
    if (!weir_read_values(count_state, slot_count, &values, err)) return false;
    for (uint32_t slot = 0; slot < slot_count; slot++) {
      const uint8_t *bytes;
      size_t len;
      counts[slot] = 0;
      if (weir_values_get(&values, slot, &bytes, &len) &&
          !stored_count(bytes, len, &counts[slot], err)) {
        weir_operator_state_values_free(&values);
        return false;
      }
      dirty[slot] = 0;
    }
    weir_operator_state_values_free(&values);
  }
  // The value each dirty slot is written back with: the last record's word, in version 2.
  const uint8_t **last = calloc(slot_count ? slot_count : 1, sizeof *last);
  size_t *last_len = calloc(slot_count ? slot_count : 1, sizeof *last_len);
  if (last == NULL || last_len == NULL) abort();
  for (size_t i = 0; i < weir_batch_len(batch); i++) {
    weir_record_t record = weir_batch_record(batch, key_slots, i);
    if (!record.has_key) {
      free(last);
      free(last_len);
      return weir_fail(err, "the counter needs records keyed by word");
    }
    uint64_t count = ++counts[record.slot];
    dirty[record.slot] = 1;
    last[record.slot] = record.value;
    last_len[record.slot] = record.value_len;
    weir_out_begin(out, record.key, record.key_len, true);
    weir_buf_append(&out->data, record.key, record.key_len);
    weir_buf_push(&out->data, '\t');
    weir_buf_append_u64(&out->data, count);
    if (version_2) {
      weir_buf_push(&out->data, '\t');
      weir_buf_append(&out->data, record.value, record.value_len);
    }
    weir_out_end(out, false, 0);
  }
  for (uint32_t slot = 0; slot < slot_count; slot++) {
    if (!dirty[slot]) continue;
    weir_ops_begin(ops, WEIR_OPERATOR_STATE_OP_KIND_VALUE_SET, count_state, slot);
    weir_ops_key_end(ops);
    if (version_2) {
      weir_buf_begin_versioned(&ops->data, 2);
      weir_buf_append(&ops->data, "{\"total\":", 9);
      weir_buf_append_u64(&ops->data, counts[slot]);
      weir_buf_append(&ops->data, ",\"last_seen\":", 13);
      append_json_string(&ops->data, last[slot], last_len[slot]);
      weir_buf_push(&ops->data, '}');
      weir_buf_end_versioned(&ops->data);
    } else {
      weir_buf_append(&ops->data, "{\"count\":", 9);
      weir_buf_append_u64(&ops->data, counts[slot]);
      weir_buf_push(&ops->data, '}');
    }
    weir_ops_end(ops);
  }
  free(last);
  free(last_len);
  return true;
}

WEIR_EXPORT_OPERATOR(count_open, count_process, weir_no_close)
