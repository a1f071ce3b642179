// Event-time timers in C (for tests/windows.rs): every record registers an event-time timer
// of its key at its own timestamp plus 1000 ms, tagged 3 (one timer per key and instant,
// however many records ask for it). When a timer fires the operator emits
// `<key> <timestamp> <tag> <watermark or "none">`; at the end of the input every pending
// timer fires, so the output has one line per distinct (key, timestamp + 1000).

#include <stdio.h>

#include "weir.h"

static bool reminders_open(const weir_context_t *ctx, operator_string_t *err) {
  (void)ctx;
  (void)err;
  return true;
}

static bool reminders_process(const weir_batch_t *batch, const operator_list_u32_t *key_slots,
                              uint32_t slot_count, weir_out_t *out, weir_ops_t *ops,
                              operator_string_t *err) {
  (void)slot_count;
  (void)out;
  for (size_t i = 0; i < batch->value_ends.len; i++) {
    weir_record_t record = weir_batch_record(batch, key_slots, i);
    if (!record.has_key || !record.has_timestamp) {
      return weir_fail(err, "records need a key and a timestamp");
    }
    weir_timer_register(ops, WEIR_OPERATOR_TYPES_TIME_DOMAIN_EVENT_TIME, record.slot,
                        record.timestamp + 1000, 3);
  }
  return true;
}

static bool reminders_on_timers(const weir_fired_timers_t *timers, uint32_t slot_count,
                                weir_out_t *out, weir_ops_t *ops, operator_string_t *err) {
  (void)slot_count;
  (void)ops;
  if (timers->domain != WEIR_OPERATOR_TYPES_TIME_DOMAIN_EVENT_TIME) {
    return weir_fail(err, "only event-time timers were registered");
  }
  int64_t watermark;
  char mark[24] = "none";
  if (weir_watermark(&watermark)) snprintf(mark, sizeof mark, "%lld", (long long)watermark);
  for (size_t i = 0; i < timers->key_slots.len; i++) {
    const uint8_t *key;
    size_t len;
    weir_timer_key(timers, i, &key, &len);
    char line[160];
    int n = snprintf(line, sizeof line, "%.*s %lld %u %s", (int)len, (const char *)key,
                     (long long)timers->timestamps.ptr[i], timers->tags.ptr[i], mark);
    weir_out_emit(out, key, len, true, line, (size_t)n);
  }
  return true;
}

WEIR_EXPORT_OPERATOR_WITH_TIMERS(reminders_open, reminders_process, reminders_on_timers,
                                 weir_no_close)
