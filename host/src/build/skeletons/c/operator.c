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

// Records seen per key: kept by the host, checkpointed with the job.
static weir_operator_state_state_id_t count_state;
// Per key slot of the current batch: its count, and whether it changed.
static uint64_t *counts;
static size_t counts_cap;
static uint8_t *changed;
static size_t changed_cap;

static bool count_open(const weir_context_t *ctx, operator_string_t *err) {
  (void)ctx;  // ctx->config holds the job file's `config` table as JSON
  return weir_declare("count", WEIR_OPERATOR_STATE_STATE_KIND_VALUE, &count_state, err);
}

// Called for every batch: emits records to `out`, logs state writes in `ops` (sent when it
// returns). Returning false (with weir_fail) fails the job.
static bool count_process(const weir_batch_t *batch, const weir_key_slots_t *key_slots,
                    uint32_t slot_count, weir_out_t *out, weir_ops_t *ops, operator_string_t *err) {
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

  for (size_t i = 0; i < weir_batch_len(batch); i++) {
    weir_record_t record = weir_batch_record(batch, key_slots, i);
    if (!record.has_key) {
      return weir_fail(err, "records need a key: set key_by for this operator in the job file");
    }
    uint64_t count = ++counts[record.slot];
    changed[record.slot] = 1;
    // `key<TAB>count`, written straight into the output batch.
    weir_out_begin(out, record.key, record.key_len, true);
    weir_buf_append(&out->data, record.key, record.key_len);
    weir_buf_push(&out->data, '\t');
    weir_buf_append_u64(&out->data, count);
    weir_out_end(out, false, 0);
  }

  // Counts are written as their JSON text; the host stores them as CBOR, as it stores every
  // language's state, so an operator in another language reads them too.
  for (uint32_t slot = 0; slot < slot_count; slot++) {
    if (!changed[slot]) continue;
    weir_ops_begin(ops, WEIR_OPERATOR_STATE_OP_KIND_VALUE_SET, count_state, slot);
    weir_ops_key_end(ops);
    weir_buf_append_u64(&ops->data, counts[slot]);
    weir_ops_end(ops);
  }
  return true;
}

WEIR_EXPORT_OPERATOR(count_open, count_process, weir_no_close)
