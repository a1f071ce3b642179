// Pipeline step 2, in C: drops the events the aggregates must not count.
//
// Input: records keyed by page with the value `action<TAB>user<TAB>ms` (from the Python
// parser). Heartbeats (`action` is "heartbeat") and requests that timed out (`ms` above
// `max_ms`, 30000 by default) are dropped; every other record passes unchanged, key included.
// Stateless, so it needs no state declarations.

#include <stdlib.h>
#include <string.h>

#include "weir.h"

static bool opened;
static weir_out_t out;
static uint64_t max_ms = 30000;

bool exports_weir_operator_processor_open(exports_weir_operator_processor_context_t *ctx,
                                          operator_string_t *err) {
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
      exports_weir_operator_processor_context_free(ctx);
      return weir_fail(err, "config `max_ms` must be a non-negative integer");
    }
  }
  exports_weir_operator_processor_context_free(ctx);
  opened = true;
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

bool exports_weir_operator_processor_process(exports_weir_operator_processor_batch_t *batch,
                                             operator_list_u32_t *key_slots,
                                             exports_weir_operator_processor_batch_t *ret,
                                             operator_string_t *err) {
  uint32_t slot_count;
  bool ok = opened ? weir_batch_check(batch, key_slots, &slot_count, err)
                   : weir_fail(err, "the operator is not open: process called before open");
  if (ok) {
    for (size_t i = 0; i < batch->value_ends.len; i++) {
      weir_record_t record = weir_batch_record(batch, key_slots, i);
      if (!keep(record.value, record.value_len)) continue;
      weir_out_begin(&out, record.key, record.key_len, record.has_key);
      weir_buf_append(&out.data, record.value, record.value_len);
      weir_out_end(&out, record.has_timestamp, record.timestamp);
    }
  }
  weir_input_free(batch, key_slots);
  if (!ok) {
    weir_out_discard(&out);
    return false;
  }
  weir_out_finish(&out, ret);
  return true;
}

bool exports_weir_operator_processor_close(exports_weir_operator_processor_batch_t *ret,
                                           operator_string_t *err) {
  if (!opened) return weir_fail(err, "the operator is not open: close called before open");
  opened = false;
  weir_out_finish(&out, ret);
  return true;
}
