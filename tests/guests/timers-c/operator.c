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

static bool reminders_process(const weir_batch_t *batch, const weir_key_slots_t *key_slots,
                              uint32_t slot_count, weir_out_t *out, weir_ops_t *ops,
                              operator_string_t *err) {
  (void)slot_count;
  (void)out;
  for (size_t i = 0; i < weir_batch_len(batch); i++) {
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
  for (size_t i = 0; i < weir_timers_len(timers); i++) {
    weir_timer_t timer = weir_timers_get(timers, i);
    char line[160];
    int n = snprintf(line, sizeof line, "%.*s %lld %u %s", (int)timer.key_len,
                     (const char *)timer.key, (long long)timer.timestamp, timer.tag, mark);
    weir_out_emit(out, timer.key, timer.key_len, true, line, (size_t)n);
  }
  return true;
}

WEIR_EXPORT_OPERATOR_WITH_TIMERS(reminders_open, reminders_process, reminders_on_timers,
                                 weir_no_close)
