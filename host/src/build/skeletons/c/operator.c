// {{name}}: a Weir operator. It counts the records of each key and emits, for every record,
// `key<TAB>count` under the same key.
//
// Build it with `weir build`, run it with `weir run job.toml`. `weir build` generates the
// bindings (operator.h) and stages the helpers, weir.h (its source: guest-sdk-c/weir.h in the
// Weir repository).
//
// Per batch: one read-values call for the counts of all keys of the batch, the counts kept
// per key slot, one apply call with the new counts.

#include "weir.h"

static bool opened;
// Records seen per key: kept by the host, checkpointed with the job.
static weir_operator_state_state_id_t count_state;
static weir_out_t out;
static weir_ops_t ops;
// Per key slot of the current batch: its count, and whether it changed.
static uint64_t *counts;
static size_t counts_cap;
static uint8_t *changed;
static size_t changed_cap;

bool exports_weir_operator_processor_open(exports_weir_operator_processor_context_t *ctx,
                                          operator_string_t *err) {
  exports_weir_operator_processor_context_free(ctx);
  if (opened) return weir_fail(err, "open called on an operator instance that is already open");
  if (!weir_declare("count", WEIR_OPERATOR_STATE_STATE_KIND_VALUE, &count_state, err)) {
    return false;
  }
  opened = true;
  return true;
}

static bool process(weir_batch_t *batch, operator_list_u32_t *key_slots, operator_string_t *err) {
  uint32_t slot_count;
  if (!weir_batch_check(batch, key_slots, &slot_count, err)) return false;
  weir_grow((void **)&counts, &counts_cap, slot_count, sizeof(uint64_t));
  weir_grow((void **)&changed, &changed_cap, slot_count, 1);

  if (slot_count > 0) {
    weir_operator_state_values_t values;
    if (!weir_read_values(count_state, slot_count, &values, err)) return false;
    for (uint32_t slot = 0; slot < slot_count; slot++) {
      const uint8_t *bytes;
      size_t len;
      counts[slot] = 0;
      changed[slot] = 0;
      if (weir_values_get(&values, slot, &bytes, &len) &&
          !weir_parse_u64(bytes, len, &counts[slot])) {
        weir_operator_state_values_free(&values);
        return weir_fail(err, "state `count`: %.*s is not a count", (int)len, (const char *)bytes);
      }
    }
    weir_operator_state_values_free(&values);
  }

  for (size_t i = 0; i < batch->value_ends.len; i++) {
    weir_record_t record = weir_batch_record(batch, key_slots, i);
    if (!record.has_key) {
      return weir_fail(err, "records need a key: set key_by for this operator in the job file");
    }
    uint64_t count = ++counts[record.slot];
    changed[record.slot] = 1;
    // `key<TAB>count`, written straight into the output batch.
    weir_out_begin(&out, record.key, record.key_len, true);
    weir_buf_append(&out.data, record.key, record.key_len);
    weir_buf_push(&out.data, '\t');
    weir_buf_append_u64(&out.data, count);
    weir_out_end(&out, false, 0);
  }

  // Counts are stored as their JSON text, like the other SDKs do.
  for (uint32_t slot = 0; slot < slot_count; slot++) {
    if (!changed[slot]) continue;
    weir_ops_begin(&ops, WEIR_OPERATOR_STATE_OP_KIND_VALUE_SET, count_state, slot);
    weir_ops_key_end(&ops);
    weir_buf_append_u64(&ops.data, counts[slot]);
    weir_ops_end(&ops);
  }
  return weir_ops_apply(&ops, err);
}

bool exports_weir_operator_processor_process(exports_weir_operator_processor_batch_t *batch,
                                             operator_list_u32_t *key_slots,
                                             exports_weir_operator_processor_batch_t *ret,
                                             operator_string_t *err) {
  bool ok = opened ? process(batch, key_slots, err)
                   : weir_fail(err, "the operator is not open: process called before open or after close");
  weir_input_free(batch, key_slots);
  if (!ok) {
    weir_out_discard(&out);
    weir_ops_clear(&ops);
    return false;
  }
  weir_out_finish(&out, ret);
  return true;
}

bool exports_weir_operator_processor_close(exports_weir_operator_processor_batch_t *ret,
                                           operator_string_t *err) {
  if (!opened) return weir_fail(err, "the operator is not open: close called before open or after close");
  opened = false;
  weir_out_finish(&out, ret);
  return true;
}
