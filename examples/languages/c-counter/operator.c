// Word count, step 2, in C: the same operator as examples/wordcount/counter.
//
// Input records are keyed by word. For every record, the count of its key goes up by one and
// the operator emits a record with the same key and the value `word<TAB><running count>`.
// The count is a value state "count", written as JSON text (`5`) and stored by the host as
// CBOR, as every language's state is: the Rust, Python and JavaScript counters read it too.
//
// Per batch: one read-values call for all keys of the batch, counts kept per key slot, one
// apply call with the batch's new counts.
//
// Build: `weir build examples/languages/c-counter`.

#include "weir.h"

static weir_operator_state_state_id_t count_state;
// Per key slot of the current batch: the running count, and whether it changed.
static uint64_t *counts;
static uint8_t *dirty;
static size_t slots_cap;

// Whether `bytes` is valid UTF-8 (the Rust counter fails on keys that are not).
static bool utf8_valid(const uint8_t *s, size_t len) {
  size_t i = 0;
  while (i < len) {
    uint8_t b = s[i];
    if (b < 0x80) {
      i++;
      continue;
    }
    size_t extra;
    uint32_t c;
    if (b >= 0xc2 && b < 0xe0) {
      extra = 1;
      c = b & 31;
    } else if (b >= 0xe0 && b < 0xf0) {
      extra = 2;
      c = b & 15;
    } else if (b >= 0xf0 && b < 0xf5) {
      extra = 3;
      c = b & 7;
    } else {
      return false;
    }
    if (i + extra >= len) return false;
    for (size_t k = 1; k <= extra; k++) {
      if ((s[i + k] & 0xc0) != 0x80) return false;
      c = (c << 6) | (s[i + k] & 63);
    }
    if ((extra == 2 && (c < 0x800 || (c >= 0xd800 && c < 0xe000))) ||
        (extra == 3 && (c < 0x10000 || c > 0x10ffff))) {
      return false;
    }
    i += extra + 1;
  }
  return true;
}

static bool count_open(const weir_context_t *ctx, operator_string_t *err) {
  (void)ctx;
  return weir_declare("count", WEIR_OPERATOR_STATE_STATE_KIND_VALUE, &count_state, err);
}

static bool count_process(const weir_batch_t *batch, const weir_key_slots_t *key_slots,
                    uint32_t slot_count, weir_out_t *out, weir_ops_t *ops, operator_string_t *err) {
  weir_grow((void **)&counts, &slots_cap, slot_count, sizeof(uint64_t));
  dirty = (uint8_t *)realloc(dirty, slots_cap ? slots_cap : 1);
  if (dirty == NULL) abort();

  weir_operator_state_values_t values;
  if (slot_count > 0) {
    if (!weir_read_values(count_state, slot_count, &values, err)) return false;
    for (uint32_t slot = 0; slot < slot_count; slot++) {
      const uint8_t *bytes;
      size_t len;
      counts[slot] = 0;
      if (weir_values_get(&values, slot, &bytes, &len) &&
          !weir_parse_u64(bytes, len, &counts[slot])) {
        weir_operator_state_values_free(&values);
        return weir_fail(err, "state `count`: %.*s is not a count", (int)len, (const char *)bytes);
      }
    }
    weir_operator_state_values_free(&values);
    memset(dirty, 0, slot_count);
  }

  for (size_t i = 0; i < weir_batch_len(batch); i++) {
    weir_record_t record = weir_batch_record(batch, key_slots, i);
    if (!record.has_key) {
      return weir_fail(err,
                       "the word counter needs records keyed by word, got one without key (value "
                       "\"%.*s\"); key the stream with key_by before this operator",
                       (int)record.value_len, (const char *)record.value);
    }
    if (!utf8_valid(record.key, record.key_len)) {
      return weir_fail(err, "the key of record %zu is not UTF-8", i);
    }
    uint64_t count = ++counts[record.slot];
    dirty[record.slot] = 1;
    // `word<TAB>count`, written straight into the output batch.
    weir_out_begin(out, record.key, record.key_len, true);
    weir_buf_append(&out->data, record.key, record.key_len);
    weir_buf_push(&out->data, '\t');
    weir_buf_append_u64(&out->data, count);
    weir_out_end(out, false, 0);
  }

  for (uint32_t slot = 0; slot < slot_count; slot++) {
    if (!dirty[slot]) continue;
    weir_ops_begin(ops, WEIR_OPERATOR_STATE_OP_KIND_VALUE_SET, count_state, slot);
    weir_ops_key_end(ops);
    weir_buf_append_u64(&ops->data, counts[slot]);
    weir_ops_end(ops);
  }
  return true;
}

WEIR_EXPORT_OPERATOR(count_open, count_process, weir_no_close)
