// Pipeline step 2, in C: drops the events the aggregates must not count.
//
// Input: records keyed by page with the value `action<TAB>user<TAB>ms` (from the Python
// parser). Heartbeats (`action` is "heartbeat") and requests that timed out (`ms` above
// `max_ms`, 30000 by default) are dropped; every other record passes unchanged, key included.
// Stateless, so it needs no state declarations.

#include <stdlib.h>
#include <string.h>

#include "weir.h"

static uint64_t max_ms = 30000;

static bool filter_open(const weir_context_t *ctx, operator_string_t *err) {
  // The configuration is a JSON object; the only setting is a number, found by hand rather
  // than with a JSON parser: `"max_ms": N`.
  const char *config = (const char *)ctx->config.ptr;
  size_t len = ctx->config.len;
  const char *found = NULL;
  for (size_t i = 0; i + 8 <= len; i++) {
    if (memcmp(config + i, "\"max_ms\"", 8) == 0) {
      found = config + i + 8;
      break;
    }
  }
  if (found != NULL) {
    const char *end = config + len;
    while (found < end && (*found == ' ' || *found == ':')) found++;
    size_t digits = 0;
    while (found + digits < end && found[digits] >= '0' && found[digits] <= '9') digits++;
    if (!weir_parse_u64((const uint8_t *)found, digits, &max_ms)) {
      return weir_fail(err, "config `max_ms` must be a non-negative integer");
    }
  }
  return true;
}

// Whether an event `action<TAB>user<TAB>ms` passes.
static bool keep(const uint8_t *value, size_t len) {
  const uint8_t *tab = memchr(value, '\t', len);
  if (tab == NULL) return true;  // not ours to judge: the aggregator reports it
  size_t action_len = (size_t)(tab - value);
  if (action_len == 9 && memcmp(value, "heartbeat", 9) == 0) return false;
  const uint8_t *last = value + len;
  while (last > value && last[-1] != '\t') last--;
  uint64_t ms;
  if (weir_parse_u64(last, (size_t)(value + len - last), &ms) && ms > max_ms) return false;
  return true;
}

static bool filter_process(const weir_batch_t *batch, const weir_key_slots_t *key_slots,
                    uint32_t slot_count, weir_out_t *out, weir_ops_t *ops, operator_string_t *err) {
  (void)slot_count, (void)ops, (void)err;
  for (size_t i = 0; i < weir_batch_len(batch); i++) {
    weir_record_t record = weir_batch_record(batch, key_slots, i);
    if (!keep(record.value, record.value_len)) continue;
    weir_out_begin(out, record.key, record.key_len, record.has_key);
    weir_buf_append(&out->data, record.value, record.value_len);
    weir_out_end(out, record.has_timestamp, record.timestamp);
  }
  return true;
}

WEIR_EXPORT_OPERATOR(filter_open, filter_process, weir_no_close)
