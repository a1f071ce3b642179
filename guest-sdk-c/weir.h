// weir.h: minimal helpers for Weir operators written in C, over the bindings that
// `wit-bindgen c` (or `weir-cbuild bindgen`) generates from wit/operator.wit into operator.h.
// `weir build` generates them and stages this header (the one of the `weir` binary) for a
// project whose operator is `operator.c`; `weir new --lang c NAME` starts one.
//
// An operator writes three functions and names them once, in one .c file:
//
//   static bool my_open(const weir_context_t *ctx, operator_string_t *err);
//   static bool my_process(const weir_batch_t *batch, const weir_key_slots_t *key_slots,
//                          uint32_t slot_count, weir_out_t *out, weir_ops_t *ops,
//                          operator_string_t *err);
//   static bool my_close(weir_out_t *out, operator_string_t *err);  // or weir_no_close
//
//   WEIR_EXPORT_OPERATOR(my_open, my_process, my_close)
//
// which defines the three exports of operator.h around them (the lifecycle the other SDKs
// own too: calls out of order refused, inputs freed, the batch checked, the writes logged in
// `ops` sent in one `apply` call after `process` returns, the records written to `out`
// returned; a function that fails drops its batch's records and writes). A failure of
// `process` tells the host its message and the index of the record being processed: the last
// one read with weir_batch_record (an operator that can still fail after its loop over
// records calls weir_no_record() after the loop). After a failure the host may roll the
// batch's state back and call `process` again without that record: keep nothing of a failed
// batch in the operator's own variables. The helpers do the batch plumbing, the same
// per-batch pattern as the Rust SDK:
//
//   - weir_batch_len, weir_batch_record: read records out of the flat input batch;
//   - weir_u32s_len, weir_u32_at, weir_s64s_len, weir_s64_at: read the WIT's number columns
//     (`u32s`, `s64s`: little-endian bytes), should an operator need one the helpers do not
//     read for it;
//   - weir_read_values: the values of *all* key slots of a batch in one `read-values` call;
//   - weir_ops_*: buffer the batch's writes, send them in one `apply` call;
//   - weir_out_*: build the output batch in growable flat buffers;
//   - weir_fail: return an error message to the host (fails the job);
//   - weir_map_size: the number of entries of a map state, in one host call;
//   - weir_read_versioned (with the operator's weir_migration_t), weir_buf_begin_versioned,
//     weir_buf_end_versioned: values of a state that evolves, with a version and a migration
//     from older ones (weir_versioned splits a stored value by hand);
//   - weir_timers_len, weir_timers_get: read the timers that fired.
//
// Ownership (wit-bindgen's C conventions): the input batch, key slots and context belong to
// the export, which frees them; the returned batch and error are freed by the bindings after
// the host has copied them, so weir_out_finish hands over its buffers; values returned by
// imports are the caller's to free (weir_operator_state_values_free, ...).
//
// Everything here is `static inline`: include this header in one or more .c files.

#ifndef WEIR_H
#define WEIR_H

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "operator.h"

// ---------------------------------------------------------------------------------------------
// Sockets: refused, never a trap
//
// Weir's sandbox grants no sockets (nor files, nor environment variables: fopen and getenv
// fail as libc does without them). WASI preview 1, which wasi-libc targets, cannot open a
// socket, so wasi-libc has no socket() or connect(); the socket calls it does have end in a
// trap in the component adapter `weir build` links. Here they fail as calls without the
// capability do: -1 with errno ENOTCAPABLE.

static inline int weir_no_sockets(void) {
  errno = ENOTCAPABLE;
  return -1;
}
#define accept(fd, addr, len) ((void)(fd), (void)(addr), (void)(len), weir_no_sockets())
#define accept4(fd, addr, len, flags) \
  ((void)(fd), (void)(addr), (void)(len), (void)(flags), weir_no_sockets())
#define recv(fd, buf, len, flags) \
  ((void)(fd), (void)(buf), (void)(len), (void)(flags), (ssize_t)weir_no_sockets())
#define send(fd, buf, len, flags) \
  ((void)(fd), (void)(buf), (void)(len), (void)(flags), (ssize_t)weir_no_sockets())
#define shutdown(fd, how) ((void)(fd), (void)(how), weir_no_sockets())

#define WEIR_NO_SLOT UINT32_MAX
#define WEIR_HAS_KEY 1
#define WEIR_HAS_TIMESTAMP 2

typedef exports_weir_operator_processor_batch_t weir_batch_t;
typedef exports_weir_operator_processor_context_t weir_context_t;

// ---------------------------------------------------------------------------------------------
// Number columns
//
// The WIT carries its numbers (record offsets, timestamps, key slots, timer tags) as `u32s`
// and `s64s`: little-endian integers, 4 or 8 bytes each, back to back in a byte list (item i
// is bytes 4i .. 4i + 4, or 8i .. 8i + 8). The helpers below read them; the batch and timer
// helpers further down read them for the operator. wasm32 is little-endian, so reading an
// item is one load (memcpy, as the bytes need not be aligned), and the output columns are
// built as arrays of native integers.

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "weir.h needs a little-endian target (wasm32 is one): the WIT's numbers are little-endian"
#endif

typedef weir_operator_types_u32s_t weir_u32s_t;
typedef weir_operator_types_s64s_t weir_s64s_t;
// The key slots `process` receives: one per record (see weir_record_t.slot).
typedef exports_weir_operator_processor_u32s_t weir_key_slots_t;

// The number of (whole) items of a column.
static inline size_t weir_u32s_len(const weir_u32s_t *column) {
  return column->len / sizeof(uint32_t);
}
static inline size_t weir_s64s_len(const weir_s64s_t *column) {
  return column->len / sizeof(int64_t);
}

// Item `i` of a column; `i` must be below its length.
static inline uint32_t weir_u32_at(const weir_u32s_t *column, size_t i) {
  uint32_t item;
  memcpy(&item, column->ptr + i * sizeof item, sizeof item);
  return item;
}
static inline int64_t weir_s64_at(const weir_s64s_t *column, size_t i) {
  int64_t item;
  memcpy(&item, column->ptr + i * sizeof item, sizeof item);
  return item;
}

// Whether a column's bytes are a whole number of items, and that number is `n`.
static inline bool weir_u32s_has(const weir_u32s_t *column, size_t n) {
  return column->len % sizeof(uint32_t) == 0 && weir_u32s_len(column) == n;
}
static inline bool weir_s64s_has(const weir_s64s_t *column, size_t n) {
  return column->len % sizeof(int64_t) == 0 && weir_s64s_len(column) == n;
}

// ---------------------------------------------------------------------------------------------
// Errors and logging

// Sets `err` to the formatted message (allocated; the bindings free it) and returns false, so
// that an export can `return weir_fail(err, "...", ...);`.
static inline bool weir_fail(operator_string_t *err, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  int len = vsnprintf(NULL, 0, fmt, args);
  va_end(args);
  if (len < 0) len = 0;
  char *text = (char *)malloc((size_t)len + 1);
  if (text == NULL) abort();
  va_start(args, fmt);
  vsnprintf(text, (size_t)len + 1, fmt, args);
  va_end(args);
  err->ptr = (uint8_t *)text;
  err->len = (size_t)len;
  return false;
}

// Moves a host error (from an import) into `err` with `context` in front; returns false.
static inline bool weir_fail_with(operator_string_t *err, const char *context,
                                  operator_string_t *host_error) {
  bool result = weir_fail(err, "%s: %.*s", context, (int)host_error->len,
                          (const char *)host_error->ptr);
  operator_string_free(host_error);
  return result;
}

static inline void weir_log(weir_operator_log_level_t level, const char *message) {
  operator_string_t text = {(uint8_t *)message, strlen(message)};
  weir_operator_log_log(level, &text);
}

// ---------------------------------------------------------------------------------------------
// Growable byte buffer

typedef struct {
  uint8_t *ptr;
  size_t len;
  size_t cap;
} weir_buf_t;

static inline void weir_grow(void **ptr, size_t *cap, size_t need, size_t item) {
  if (need <= *cap) return;
  size_t cap2 = *cap ? *cap * 2 : 64;
  while (cap2 < need) cap2 *= 2;
  void *bigger = realloc(*ptr, cap2 * item);
  if (bigger == NULL) abort();
  *ptr = bigger;
  *cap = cap2;
}

static inline void weir_buf_reserve(weir_buf_t *buf, size_t extra) {
  weir_grow((void **)&buf->ptr, &buf->cap, buf->len + extra, 1);
}

static inline void weir_buf_append(weir_buf_t *buf, const void *bytes, size_t len) {
  weir_buf_reserve(buf, len);
  if (len) memcpy(buf->ptr + buf->len, bytes, len);
  buf->len += len;
}

static inline void weir_buf_push(weir_buf_t *buf, uint8_t byte) {
  weir_buf_reserve(buf, 1);
  buf->ptr[buf->len++] = byte;
}

// Appends `n` in decimal (which is also its JSON text).
static inline void weir_buf_append_u64(weir_buf_t *buf, uint64_t n) {
  char digits[20];
  size_t i = sizeof digits;
  do {
    digits[--i] = (char)('0' + n % 10);
    n /= 10;
  } while (n);
  weir_buf_append(buf, digits + i, sizeof digits - i);
}

// Parses the JSON text of a non-negative integer (what weir_buf_append_u64 wrote).
static inline bool weir_parse_u64(const uint8_t *text, size_t len, uint64_t *out) {
  if (len == 0 || len > 20) return false;
  uint64_t n = 0;
  for (size_t i = 0; i < len; i++) {
    if (text[i] < '0' || text[i] > '9') return false;
    uint64_t next = n * 10 + (uint64_t)(text[i] - '0');
    if (next / 10 != n) return false;  // overflow
    n = next;
  }
  *out = n;
  return true;
}

// ---------------------------------------------------------------------------------------------
// Input batch

// The record being processed when `process` fails: its index in the batch, set by
// weir_batch_record, or WEIR_NO_RECORD. One variable for every .c file of the operator:
// WEIR_EXPORT_OPERATOR defines it.
#define WEIR_NO_RECORD UINT32_MAX
extern uint32_t weir_current_record_;

// Says that what follows concerns no one record (the end of a batch, after the loop over its
// records): a failure then names none.
static inline void weir_no_record(void) { weir_current_record_ = WEIR_NO_RECORD; }

typedef struct {
  const uint8_t *key;  // NULL-free: points into the batch even for records without key
  size_t key_len;
  bool has_key;
  const uint8_t *value;
  size_t value_len;
  bool has_timestamp;
  int64_t timestamp;
  uint32_t slot;  // WEIR_NO_SLOT for a record without key
} weir_record_t;

// The number of records of a batch (one flags byte each). After weir_batch_check, which the
// exports run before `process`, every column of the batch and its key slots have one item
// per record.
static inline size_t weir_batch_len(const weir_batch_t *batch) { return batch->flags.len; }

// Checks the batch's shape (five columns and the key slots with one whole item per record,
// offsets in range) and returns the number of key slots of the batch in *slot_count.
static inline bool weir_batch_check(const weir_batch_t *batch, const weir_key_slots_t *slots,
                                    uint32_t *slot_count, operator_string_t *err) {
  size_t n = weir_batch_len(batch);
  if (!weir_u32s_has(&batch->key_ends, n) || !weir_u32s_has(&batch->value_ends, n) ||
      !weir_s64s_has(&batch->timestamps, n) || !weir_u32s_has(slots, n)) {
    return weir_fail(err,
                     "malformed batch: %zu flags, but %zu bytes of key ends, %zu of value ends, "
                     "%zu of timestamps and %zu of key slots",
                     n, batch->key_ends.len, batch->value_ends.len, batch->timestamps.len,
                     slots->len);
  }
  uint32_t start = 0;
  int64_t top = -1;
  for (size_t i = 0; i < n; i++) {
    uint32_t key_end = weir_u32_at(&batch->key_ends, i);
    uint32_t value_end = weir_u32_at(&batch->value_ends, i);
    if (key_end < start || value_end < key_end || value_end > batch->data.len) {
      return weir_fail(err, "malformed batch: record %zu out of range", i);
    }
    start = value_end;
    uint32_t slot = weir_u32_at(slots, i);
    if (slot != WEIR_NO_SLOT) {
      if (slot >= n) return weir_fail(err, "malformed batch: key slot %u", slot);
      if ((int64_t)slot > top) top = slot;
    }
  }
  *slot_count = (uint32_t)(top + 1);
  return true;
}

// Record `i` of a batch that passed weir_batch_check; a failure from here on names it.
static inline weir_record_t weir_batch_record(const weir_batch_t *batch,
                                              const weir_key_slots_t *slots, size_t i) {
  weir_current_record_ = (uint32_t)i;
  uint32_t start = i ? weir_u32_at(&batch->value_ends, i - 1) : 0;
  uint32_t key_end = weir_u32_at(&batch->key_ends, i);
  uint8_t flags = batch->flags.ptr[i];
  weir_record_t record;
  record.key = batch->data.ptr + start;
  record.key_len = key_end - start;
  record.has_key = (flags & WEIR_HAS_KEY) != 0;
  record.value = batch->data.ptr + key_end;
  record.value_len = weir_u32_at(&batch->value_ends, i) - key_end;
  record.has_timestamp = (flags & WEIR_HAS_TIMESTAMP) != 0;
  record.timestamp = weir_s64_at(&batch->timestamps, i);
  record.slot = weir_u32_at(slots, i);
  return record;
}

// Frees the export's arguments (they belong to the export).
static inline void weir_input_free(weir_batch_t *batch, weir_key_slots_t *slots) {
  weir_operator_types_batch_free(batch);
  exports_weir_operator_processor_u32s_free(slots);
}

// ---------------------------------------------------------------------------------------------
// State

// Declares a state; call in `open`. Its values, map keys and list items are JSON text (as
// weir_buf_append_u64 writes a number): the host stores them as CBOR, the one encoding every
// language reads, and hands them back as JSON text. Bytes that are not JSON are an error.
static inline bool weir_declare(const char *name, weir_operator_state_state_kind_t kind,
                                weir_operator_state_state_id_t *id, operator_string_t *err) {
  operator_string_t text = {(uint8_t *)name, strlen(name)};
  operator_string_t host_error;
  if (!weir_operator_state_declare(&text, kind, WEIR_OPERATOR_STATE_ENCODING_JSON, id,
                                   &host_error)) {
    return weir_fail_with(err, "declaring state", &host_error);
  }
  return true;
}

// The values of value state `state` for key slots 0 .. slot_count: one `read-values` call.
// Free *values with weir_operator_state_values_free.
static inline bool weir_read_values(weir_operator_state_state_id_t state, uint32_t slot_count,
                                    weir_operator_state_values_t *values, operator_string_t *err) {
  // 0, 1, 2, ... as native integers: on a little-endian target, the bytes of a `u32s`.
  static uint32_t *all_slots;
  static size_t all_cap, all_len;
  weir_grow((void **)&all_slots, &all_cap, slot_count, sizeof(uint32_t));
  while (all_len < slot_count) {
    all_slots[all_len] = (uint32_t)all_len;
    all_len++;
  }
  weir_operator_state_u32s_t slots = {(uint8_t *)all_slots, slot_count * sizeof(uint32_t)};
  operator_string_t host_error;
  if (!weir_operator_state_read_values(state, &slots, values, &host_error)) {
    return weir_fail_with(err, "reading values", &host_error);
  }
  if (values->present.len != slot_count || !weir_u32s_has(&values->items.ends, slot_count)) {
    weir_operator_state_values_free(values);
    return weir_fail(err, "malformed reply from the host to read-values");
  }
  return true;
}

// The number of entries of map state `state` for key slot `slot` (send the batch's pending
// writes with weir_ops_apply first if they should count): one host call, constant time.
static inline bool weir_map_size(weir_operator_state_state_id_t state, uint32_t slot,
                                 uint32_t *size, operator_string_t *err) {
  operator_string_t host_error;
  if (!weir_operator_state_map_size(state, slot, size, &host_error)) {
    return weir_fail_with(err, "reading a map's size", &host_error);
  }
  return true;
}

// The value of slot `slot` in a read-values reply: false if the key has none.
static inline bool weir_values_get(const weir_operator_state_values_t *values, uint32_t slot,
                                   const uint8_t **bytes, size_t *len) {
  if (!values->present.ptr[slot]) return false;  // one byte per slot: 1 present, 0 absent
  uint32_t start = slot ? weir_u32_at(&values->items.ends, slot - 1) : 0;
  *bytes = values->items.data.ptr + start;
  *len = weir_u32_at(&values->items.ends, slot) - start;
  return true;
}

// State that evolves (docs/upgrading.md). A value of version 1 is its plain JSON text; a value
// of version 2 or later is wrapped, and the host hands it back as exactly
// `{"$version":N,"$value":V}` whatever the language that wrote it (the host stores it as the
// CBOR tag 0x57454952 around [N, V], as the Rust, Python and JavaScript SDKs do). An operator
// reads the stored version with weir_versioned, migrates a value of an older version itself,
// and writes values of its current version between weir_buf_begin_versioned and
// weir_buf_end_versioned (for version 1, write the value alone).

// The version of the stored value `text` and its value's JSON text (`*value`, `*value_len`):
// version 1 and the whole text when it is not wrapped. False for a wrapper that is not of that
// exact form (a version that is not a positive integer).
static inline bool weir_versioned(const uint8_t *text, size_t len, uint64_t *version,
                                  const uint8_t **value, size_t *value_len) {
  static const char head[] = "{\"$version\":";
  static const char middle[] = ",\"$value\":";
  const size_t head_len = sizeof head - 1, middle_len = sizeof middle - 1;
  *version = 1;
  *value = text;
  *value_len = len;
  if (len < head_len || memcmp(text, head, head_len) != 0) return true;
  size_t digits = 0;
  while (head_len + digits < len && text[head_len + digits] >= '0' &&
         text[head_len + digits] <= '9') {
    digits++;
  }
  size_t at = head_len + digits;
  if (!weir_parse_u64(text + head_len, digits, version) || *version == 0 ||
      len < at + middle_len + 1 || memcmp(text + at, middle, middle_len) != 0 ||
      text[len - 1] != '}') {
    return false;
  }
  *value = text + at + middle_len;
  *value_len = len - 1 - (at + middle_len);
  return true;
}

// Opens a value of `version` (2 or later) in `buf`: its JSON text follows, then
// weir_buf_end_versioned.
static inline void weir_buf_begin_versioned(weir_buf_t *buf, uint64_t version) {
  static const char head[] = "{\"$version\":";
  static const char middle[] = ",\"$value\":";
  weir_buf_append(buf, head, sizeof head - 1);
  weir_buf_append_u64(buf, version);
  weir_buf_append(buf, middle, sizeof middle - 1);
}

static inline void weir_buf_end_versioned(weir_buf_t *buf) { weir_buf_push(buf, '}'); }

// A migration: writes into `out` the JSON text, in the state's current version, of `value`
// (`len` bytes of JSON text) stored at `version`; false (with weir_fail) if it cannot.
typedef bool (*weir_migration_t)(uint64_t version, const uint8_t *value, size_t len,
                                 weir_buf_t *out, operator_string_t *err);

// Reads the stored value `text` of a state of `current` version, as the other SDKs do: a
// value of `current` version is copied into `out` as it is; an older one goes through
// `migrate`, which writes it into `out` in the current version, and *migrated is set (write
// it back, between weir_buf_begin_versioned and weir_buf_end_versioned); a newer one, written
// by a later version of the operator, is an error naming `state`.
static inline bool weir_read_versioned(const char *state, const uint8_t *text, size_t len,
                                       uint64_t current, weir_migration_t migrate,
                                       weir_buf_t *out, bool *migrated, operator_string_t *err) {
  uint64_t version;
  const uint8_t *value;
  size_t value_len;
  *migrated = false;
  if (!weir_versioned(text, len, &version, &value, &value_len)) {
    return weir_fail(err, "state `%s`: a malformed versioned value: %.*s", state, (int)len,
                     (const char *)text);
  }
  if (version == current) {
    weir_buf_append(out, value, value_len);
    return true;
  }
  if (version > current) {
    return weir_fail(err,
                     "state `%s`: the stored value is of version %llu, newer than this "
                     "operator's version %llu of the state: it was written by a later version "
                     "of the operator; run that version, or restore a checkpoint taken before it",
                     state, (unsigned long long)version, (unsigned long long)current);
  }
  if (migrate == NULL) {
    return weir_fail(err,
                     "state `%s`: the stored value is of version %llu and the state, of version "
                     "%llu, declares no migration",
                     state, (unsigned long long)version, (unsigned long long)current);
  }
  *migrated = true;
  return migrate(version, value, value_len, out, err);
}

// One operation of an `apply` log. The WIT lays an operation out as five little-endian u32
// words; WebAssembly is little-endian, so an array of these is the log as it is sent.
typedef struct {
  uint32_t kind;  // a weir_operator_state_op_kind_t
  uint32_t state;
  uint32_t slot;
  uint32_t key_end;
  uint32_t value_end;
} weir_op_t;
_Static_assert(sizeof(weir_op_t) == 20, "an apply operation is five u32 words");

// A batch's writes, sent in one `apply` call.
typedef struct {
  weir_op_t *ops;
  size_t len;
  size_t cap;
  weir_buf_t data;
} weir_ops_t;

// Opens an operation: the caller then appends its map key to ops->data (if the kind takes
// one), calls weir_ops_key_end, appends its value (if any), and calls weir_ops_end.
static inline void weir_ops_begin(weir_ops_t *ops, weir_operator_state_op_kind_t kind,
                                  weir_operator_state_state_id_t state, uint32_t slot) {
  weir_grow((void **)&ops->ops, &ops->cap, ops->len + 1, sizeof(weir_op_t));
  weir_op_t *op = &ops->ops[ops->len];
  op->kind = kind;
  op->state = state;
  op->slot = slot;
  op->key_end = op->value_end = (uint32_t)ops->data.len;
}

static inline void weir_ops_key_end(weir_ops_t *ops) {
  ops->ops[ops->len].key_end = ops->ops[ops->len].value_end = (uint32_t)ops->data.len;
}

static inline void weir_ops_end(weir_ops_t *ops) {
  ops->ops[ops->len].value_end = (uint32_t)ops->data.len;
  ops->len++;
}

// One operation with its map key and value given as bytes (either may be NULL/0).
static inline void weir_ops_push(weir_ops_t *ops, weir_operator_state_op_kind_t kind,
                                 weir_operator_state_state_id_t state, uint32_t slot,
                                 const void *key, size_t key_len, const void *value,
                                 size_t value_len) {
  weir_ops_begin(ops, kind, state, slot);
  weir_buf_append(&ops->data, key, key_len);
  weir_ops_key_end(ops);
  weir_buf_append(&ops->data, value, value_len);
  weir_ops_end(ops);
}

// Sends the pending writes in one `apply` call and empties the log (its buffers are kept).
static inline bool weir_ops_apply(weir_ops_t *ops, operator_string_t *err) {
  if (ops->len == 0) return true;
  operator_list_u8_t log = {(uint8_t *)ops->ops, ops->len * sizeof(weir_op_t)};
  operator_list_u8_t data = {ops->data.ptr, ops->data.len};
  operator_string_t host_error;
  bool ok = weir_operator_state_apply(&log, &data, &host_error);
  ops->len = 0;
  ops->data.len = 0;
  return ok ? true : weir_fail_with(err, "applying state writes", &host_error);
}

static inline void weir_ops_clear(weir_ops_t *ops) {
  ops->len = 0;
  ops->data.len = 0;
}

// ---------------------------------------------------------------------------------------------
// Output batch

// The number columns are arrays of native integers: on a little-endian target their memory
// is the `u32s` and `s64s` bytes the WIT carries, handed over as they are.
typedef struct {
  weir_buf_t data;
  uint32_t *key_ends;
  uint32_t *value_ends;
  uint8_t *flags;
  int64_t *timestamps;
  size_t len;
  size_t cap;
} weir_out_t;

// Starts a record: writes its key (if has_key). Append the value to out->data, then call
// weir_out_end.
static inline void weir_out_begin(weir_out_t *out, const void *key, size_t key_len, bool has_key) {
  if (out->len == out->cap) {
    size_t cap = out->cap ? out->cap * 2 : 256;
    out->key_ends = (uint32_t *)realloc(out->key_ends, cap * sizeof(uint32_t));
    out->value_ends = (uint32_t *)realloc(out->value_ends, cap * sizeof(uint32_t));
    out->flags = (uint8_t *)realloc(out->flags, cap);
    out->timestamps = (int64_t *)realloc(out->timestamps, cap * sizeof(int64_t));
    if (!out->key_ends || !out->value_ends || !out->flags || !out->timestamps) abort();
    out->cap = cap;
  }
  if (has_key) weir_buf_append(&out->data, key, key_len);
  out->key_ends[out->len] = (uint32_t)out->data.len;
  out->flags[out->len] = has_key ? WEIR_HAS_KEY : 0;
}

static inline void weir_out_end(weir_out_t *out, bool has_timestamp, int64_t timestamp) {
  out->value_ends[out->len] = (uint32_t)out->data.len;
  if (has_timestamp) out->flags[out->len] |= WEIR_HAS_TIMESTAMP;
  out->timestamps[out->len] = has_timestamp ? timestamp : 0;
  out->len++;
}

static inline void weir_out_emit(weir_out_t *out, const void *key, size_t key_len, bool has_key,
                                 const void *value, size_t value_len) {
  weir_out_begin(out, key, key_len, has_key);
  weir_buf_append(&out->data, value, value_len);
  weir_out_end(out, false, 0);
}

// Hands the emitted records over as the export's return value (the bindings free the
// buffers after the host copied them) and leaves `out` empty.
static inline void weir_out_finish(weir_out_t *out, weir_batch_t *ret) {
  ret->data.ptr = out->data.ptr;
  ret->data.len = out->data.len;
  ret->key_ends.ptr = (uint8_t *)out->key_ends;
  ret->key_ends.len = out->len * sizeof(uint32_t);
  ret->value_ends.ptr = (uint8_t *)out->value_ends;
  ret->value_ends.len = out->len * sizeof(uint32_t);
  ret->flags.ptr = out->flags;
  ret->flags.len = out->len;
  ret->timestamps.ptr = (uint8_t *)out->timestamps;
  ret->timestamps.len = out->len * sizeof(int64_t);
  memset(out, 0, sizeof *out);
}

// Drops the emitted records (after an error); keeps nothing.
static inline void weir_out_discard(weir_out_t *out) {
  free(out->data.ptr);
  free(out->key_ends);
  free(out->value_ends);
  free(out->flags);
  free(out->timestamps);
  memset(out, 0, sizeof *out);
}

// ---------------------------------------------------------------------------------------------
// The exports

// Moves a failure's message into the WIT `failure` of `process` or `close`, naming `record`
// (WEIR_NO_RECORD: none); returns false.
static inline bool weir_failure(exports_weir_operator_processor_failure_t *failure,
                                operator_string_t *message, uint32_t record) {
  failure->message = *message;
  failure->record.is_some = record != WEIR_NO_RECORD;
  failure->record.val = record == WEIR_NO_RECORD ? 0 : record;
  return false;
}

// ---------------------------------------------------------------------------------------------
// Timers

typedef exports_weir_operator_processor_fired_timers_t weir_fired_timers_t;

// Registers (or, with weir_timer_delete, deletes) a timer of the key in `slot` in the batch's
// log of writes: `domain` is WEIR_OPERATOR_TYPES_TIME_DOMAIN_EVENT_TIME (fires when the
// watermark reaches `at`) or ..._PROCESSING_TIME (when the host's clock does); `at` is in
// milliseconds since the Unix epoch; `tag` tells the operator's timers apart. One timer exists
// per (key, domain, at, tag). Timers are keyed state: checkpointed and rescaled with the key.
static inline void weir_timer_op(weir_ops_t *ops, weir_operator_state_op_kind_t kind,
                                 weir_operator_types_time_domain_t domain, uint32_t slot,
                                 int64_t at, uint32_t tag) {
  uint8_t bytes[12];
  for (int i = 0; i < 8; i++) bytes[i] = (uint8_t)((uint64_t)at >> (8 * i));
  for (int i = 0; i < 4; i++) bytes[8 + i] = (uint8_t)(tag >> (8 * i));
  weir_ops_push(ops, kind, (weir_operator_state_state_id_t)domain, slot, NULL, 0, bytes, 12);
}

static inline void weir_timer_register(weir_ops_t *ops, weir_operator_types_time_domain_t domain,
                                       uint32_t slot, int64_t at, uint32_t tag) {
  weir_timer_op(ops, WEIR_OPERATOR_STATE_OP_KIND_TIMER_REGISTER, domain, slot, at, tag);
}

static inline void weir_timer_delete(weir_ops_t *ops, weir_operator_types_time_domain_t domain,
                                     uint32_t slot, int64_t at, uint32_t tag) {
  weir_timer_op(ops, WEIR_OPERATOR_STATE_OP_KIND_TIMER_DELETE, domain, slot, at, tag);
}

// The subtask's watermark in *watermark; false before the first watermark.
static inline bool weir_watermark(int64_t *watermark) {
  return weir_operator_time_watermark(watermark);
}

// The host's clock, in milliseconds since the Unix epoch.
static inline int64_t weir_processing_time(void) { return weir_operator_time_processing_time(); }

// The number of timers that fired. After weir_timers_check, which the on-timers export runs
// before the operator's function, every list of `timers` has one item per timer.
static inline size_t weir_timers_len(const weir_fired_timers_t *timers) {
  return weir_u32s_len(&timers->key_slots);
}

// The key of fired timer `i`.
static inline void weir_timer_key(const weir_fired_timers_t *timers, size_t i, const uint8_t **key,
                                  size_t *len) {
  size_t start = i == 0 ? 0 : weir_u32_at(&timers->keys.ends, i - 1);
  *key = timers->keys.data.ptr + start;
  *len = weir_u32_at(&timers->keys.ends, i) - start;
}

typedef struct {
  const uint8_t *key;
  size_t key_len;
  uint32_t slot;  // the key's slot: state calls and timer registrations name it
  int64_t timestamp;  // when it was set to fire, in milliseconds since the Unix epoch
  uint32_t tag;  // as registered
} weir_timer_t;

// Fired timer `i` (below weir_timers_len); a failure from here on names it.
static inline weir_timer_t weir_timers_get(const weir_fired_timers_t *timers, size_t i) {
  weir_current_record_ = (uint32_t)i;
  weir_timer_t timer;
  weir_timer_key(timers, i, &timer.key, &timer.key_len);
  timer.slot = weir_u32_at(&timers->key_slots, i);
  timer.timestamp = weir_s64_at(&timers->timestamps, i);
  timer.tag = weir_u32_at(&timers->tags, i);
  return timer;
}

// Checks the fired timers' lists and counts their key slots (as weir_batch_check does).
static inline bool weir_timers_check(const weir_fired_timers_t *timers, uint32_t *slot_count,
                                     operator_string_t *err) {
  size_t n = weir_timers_len(timers);
  if (!weir_u32s_has(&timers->key_slots, n) || !weir_u32s_has(&timers->keys.ends, n) ||
      !weir_s64s_has(&timers->timestamps, n) || !weir_u32s_has(&timers->tags, n)) {
    return weir_fail(err,
                     "malformed timers: %zu bytes of key slots, %zu of key ends, %zu of "
                     "timestamps and %zu of tags",
                     timers->key_slots.len, timers->keys.ends.len, timers->timestamps.len,
                     timers->tags.len);
  }
  uint32_t start = 0;
  uint32_t count = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t end = weir_u32_at(&timers->keys.ends, i);
    if (end < start || end > timers->keys.data.len) {
      return weir_fail(err, "malformed timers: the key of timer %zu is out of range", i);
    }
    start = end;
    uint32_t slot = weir_u32_at(&timers->key_slots, i);
    if (slot >= n) return weir_fail(err, "malformed timers: key slot %u of %zu timers", slot, n);
    if (slot + 1 > count) count = slot + 1;
  }
  *slot_count = count;
  return true;
}

// An on-timers function for operators that register no timers.
static inline bool weir_no_timers(const weir_fired_timers_t *timers, uint32_t slot_count,
                                  weir_out_t *out, weir_ops_t *ops, operator_string_t *err) {
  (void)slot_count;
  (void)out;
  (void)ops;
  return weir_fail(err, "%zu timers fired but the operator handles no timers (give "
                        "WEIR_EXPORT_OPERATOR_WITH_TIMERS an on-timers function)",
                   weir_timers_len(timers));
}

// A close function for operators that emit nothing at the end of input.
static inline bool weir_no_close(weir_out_t *out, operator_string_t *err) {
  (void)out;
  (void)err;
  return true;
}

// Defines the exports of operator.h around an operator's open, process and close functions
// (see the top of this file), for an operator without timers. Use it once, in one .c file.
#define WEIR_EXPORT_OPERATOR(open_fn, process_fn, close_fn) \
  WEIR_EXPORT_OPERATOR_WITH_TIMERS(open_fn, process_fn, weir_no_timers, close_fn)

// The same with an on-timers function, called with the timers that fired:
//
//   static bool my_on_timers(const weir_fired_timers_t *timers, uint32_t slot_count,
//                            weir_out_t *out, weir_ops_t *ops, operator_string_t *err);
//
// weir_timers_len(timers) timers fired; weir_timers_get(timers, i) is timer i, with its key,
// key slot (state calls and timer registrations name it), timestamp and tag; timers->domain
// says which clock fired them. Records go to `out`, state writes to `ops`, as in `process`; a
// failure names the timer last read with weir_timers_get (or set with weir_current_record_).
#define WEIR_EXPORT_OPERATOR_WITH_TIMERS(open_fn, process_fn, timers_fn, close_fn)               \
  uint32_t weir_current_record_ = WEIR_NO_RECORD;                                                \
  static bool weir_opened_;                                                                      \
  static weir_out_t weir_out_;                                                                   \
  static weir_ops_t weir_ops_;                                                                   \
                                                                                                 \
  bool exports_weir_operator_processor_open(weir_context_t *ctx, operator_string_t *err) {       \
    bool ok = weir_opened_                                                                       \
                  ? weir_fail(err, "open called on an operator instance that is already open")   \
                  : open_fn(ctx, err);                                                           \
    exports_weir_operator_processor_context_free(ctx);                                           \
    if (ok) weir_opened_ = true;                                                                 \
    return ok;                                                                                   \
  }                                                                                              \
                                                                                                 \
  bool exports_weir_operator_processor_process(weir_batch_t *batch, weir_key_slots_t *slots,     \
                                               weir_batch_t *ret,                                \
                                               exports_weir_operator_processor_failure_t *err) { \
    operator_string_t message = {NULL, 0}; /* empty if a function fails without weir_fail */     \
    uint32_t slot_count;                                                                         \
    weir_current_record_ = WEIR_NO_RECORD;                                                       \
    bool ok = weir_opened_ ? weir_batch_check(batch, slots, &slot_count, &message) &&            \
                                 process_fn(batch, slots, slot_count, &weir_out_, &weir_ops_,    \
                                            &message)                                            \
                           : weir_fail(&message, "the operator is not open: process called "     \
                                                 "before open or after close");                  \
    if (ok) {                                                                                    \
      weir_current_record_ = WEIR_NO_RECORD;                                                     \
      ok = weir_ops_apply(&weir_ops_, &message);                                                 \
    }                                                                                            \
    weir_input_free(batch, slots);                                                               \
    if (!ok) {                                                                                   \
      weir_out_discard(&weir_out_);                                                              \
      weir_ops_clear(&weir_ops_);                                                                \
      return weir_failure(err, &message, weir_current_record_);                                  \
    }                                                                                            \
    weir_out_finish(&weir_out_, ret);                                                            \
    return true;                                                                                 \
  }                                                                                              \
                                                                                                 \
  bool exports_weir_operator_processor_on_timers(weir_fired_timers_t *timers, weir_batch_t *ret, \
                                                 exports_weir_operator_processor_failure_t *err) { \
    operator_string_t message = {NULL, 0};                                                       \
    uint32_t slot_count;                                                                         \
    weir_current_record_ = WEIR_NO_RECORD;                                                       \
    bool ok = weir_opened_ ? weir_timers_check(timers, &slot_count, &message) &&                 \
                                 timers_fn(timers, slot_count, &weir_out_, &weir_ops_, &message) \
                           : weir_fail(&message, "the operator is not open: on-timers called "   \
                                                 "before open or after close");                  \
    if (ok) {                                                                                    \
      weir_current_record_ = WEIR_NO_RECORD;                                                     \
      ok = weir_ops_apply(&weir_ops_, &message);                                                 \
    }                                                                                            \
    exports_weir_operator_processor_fired_timers_free(timers);                                   \
    if (!ok) {                                                                                   \
      weir_out_discard(&weir_out_);                                                              \
      weir_ops_clear(&weir_ops_);                                                                \
      return weir_failure(err, &message, weir_current_record_);                                  \
    }                                                                                            \
    weir_out_finish(&weir_out_, ret);                                                            \
    return true;                                                                                 \
  }                                                                                              \
                                                                                                 \
  bool exports_weir_operator_processor_close(weir_batch_t *ret,                                  \
                                             exports_weir_operator_processor_failure_t *err) {   \
    operator_string_t message = {NULL, 0};                                                       \
    if (!weir_opened_) {                                                                         \
      weir_fail(&message, "the operator is not open: close called before open or after close");  \
      return weir_failure(err, &message, WEIR_NO_RECORD);                                        \
    }                                                                                            \
    weir_opened_ = false;                                                                        \
    if (!close_fn(&weir_out_, &message)) {                                                       \
      weir_out_discard(&weir_out_);                                                              \
      return weir_failure(err, &message, WEIR_NO_RECORD);                                        \
    }                                                                                            \
    weir_out_finish(&weir_out_, ret);                                                            \
    return true;                                                                                 \
  }

#endif  // WEIR_H
