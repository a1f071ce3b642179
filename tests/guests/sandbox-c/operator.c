// A C operator that reaches for everything a sandbox grants or refuses, for tests/sandbox.rs.
//
// For each record it prints to stdout and stderr and logs through the SDK, and emits one
// record per check, `check=result`:
//
// - `wall_clock=SECONDS` (`time`), `monotonic=ok` (`clock_gettime(CLOCK_MONOTONIC)` does not
//   go back);
// - `random=HEX,HEX` (two draws of 16 bytes from `getentropy`);
// - `file=`, `env=`, `socket=`: `refused: ERRNO` (or `refused: NULL` for `getenv`) when
//   opening `/etc/passwd`, reading `WEIR_PROBE_SECRET` and accepting a connection fail, or
//   what was read if they do not. wasi-libc has no `socket` or `connect` (WASI preview 1
//   has no way to open a socket): `accept` on the descriptors a host could have granted
//   sockets as is the call there is.

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "weir.h"

static const char *errno_name(int e) {
  switch (e) {
    case ENOENT: return "ENOENT";
    case EACCES: return "EACCES";
    case EPERM: return "EPERM";
    case EBADF: return "EBADF";
    case ENOTCAPABLE: return "ENOTCAPABLE";
    case ENOTSUP: return "ENOTSUP";
    case ENOTSOCK: return "ENOTSOCK";
    default: return "another errno";
  }
}

static void emit(weir_out_t *out, const weir_record_t *record, const char *text) {
  weir_out_emit(out, record->key, record->key_len, record->has_key, text, strlen(text));
}

static void hex(char *to, const unsigned char *bytes, size_t len) {
  for (size_t i = 0; i < len; i++) sprintf(to + 2 * i, "%02x", bytes[i]);
}

static bool probe_open(const weir_context_t *ctx, operator_string_t *err) {
  (void)ctx;
  (void)err;
  return true;
}

static bool probe_process(const weir_batch_t *batch, const weir_key_slots_t *key_slots,
                          uint32_t slot_count, weir_out_t *out, weir_ops_t *ops,
                          operator_string_t *err) {
  (void)slot_count;
  (void)ops;
  (void)err;
  char line[160];
  for (size_t i = 0; i < weir_batch_len(batch); i++) {
    weir_record_t record = weir_batch_record(batch, key_slots, i);
    printf("probe: printf\n");
    fflush(stdout);
    fprintf(stderr, "probe: fprintf(stderr)\n");
    weir_log(WEIR_OPERATOR_LOG_LEVEL_INFO, "probe: weir_log");

    struct timespec before, after;
    clock_gettime(CLOCK_MONOTONIC, &before);
    snprintf(line, sizeof line, "wall_clock=%lld", (long long)time(NULL));
    emit(out, &record, line);
    clock_gettime(CLOCK_MONOTONIC, &after);
    bool forward = after.tv_sec > before.tv_sec ||
                   (after.tv_sec == before.tv_sec && after.tv_nsec >= before.tv_nsec);
    emit(out, &record, forward ? "monotonic=ok" : "monotonic=went back");

    unsigned char a[16], b[16];
    char ha[33], hb[33];
    if (getentropy(a, sizeof a) != 0 || getentropy(b, sizeof b) != 0) {
      snprintf(line, sizeof line, "random=refused: %s", errno_name(errno));
    } else {
      hex(ha, a, sizeof a);
      hex(hb, b, sizeof b);
      snprintf(line, sizeof line, "random=%s,%s", ha, hb);
    }
    emit(out, &record, line);

    FILE *file = fopen("/etc/passwd", "r");
    if (file == NULL) {
      snprintf(line, sizeof line, "file=refused: %s", errno_name(errno));
    } else {
      snprintf(line, sizeof line, "file=granted: %.20s", fgets(line + 100, 40, file));
      fclose(file);
    }
    emit(out, &record, line);

    const char *secret = getenv("WEIR_PROBE_SECRET");
    snprintf(line, sizeof line, "env=%s%s", secret == NULL ? "refused: NULL" : "granted: ",
             secret == NULL ? "" : secret);
    emit(out, &record, line);

    int accepted = -1;
    int accept_errno = 0;
    for (int fd = 3; fd < 8 && accepted < 0; fd++) {
      accepted = accept(fd, NULL, NULL);
      accept_errno = errno;
    }
    if (accepted >= 0) {
      snprintf(line, sizeof line, "socket=granted: fd %d", accepted);
    } else {
      snprintf(line, sizeof line, "socket=refused: %s", errno_name(accept_errno));
    }
    emit(out, &record, line);
  }
  return true;
}

WEIR_EXPORT_OPERATOR(probe_open, probe_process, weir_no_close)
