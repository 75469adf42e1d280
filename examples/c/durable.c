/*
 * durable: a durable subscriber in C (pg_merging_subscriber_new with a durable name). Its
 * position in each stream of TOPIC is kept in the recording folder DIR (what `peregrine
 * record --dir DIR` writes) under NAME: started again, it resumes where it stood, the
 * recorded history first, then live. Prints one line per message (seq=N: PAYLOAD) and per
 * event (SEAM, RECOVERED, GAP, CAUGHT UP), and exits 0 after COUNT messages, freeing the
 * subscriber (which keeps its position).
 *
 *   durable TOPIC DIR NAME COUNT
 *
 * 20 s without a message, or a GAP, is a failure (exit 1).
 */
#define _POSIX_C_SOURCE 200809L
#include <peregrine.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef struct {
    uint64_t count;
} state;

static void on_message(void *user, const pg_message *m) {
    state *s = user;
    printf("seq=%" PRIu64 ": %.*s\n", m->sequence, (int)m->length, (const char *)m->payload);
    s->count++;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s TOPIC DIR NAME COUNT\n", argv[0]);
        return 2;
    }
    uint64_t want = strtoull(argv[4], NULL, 10);
    pg_context *ctx = NULL;
    pg_merging_subscriber *s = NULL;
    int32_t rc = pg_context_from_env(&ctx);
    /* A name never kept starts live (from_sequence -1); one kept resumes. */
    if (rc == PG_OK)
        rc = pg_merging_subscriber_new(ctx, argv[1], argv[2], NULL, -1, argv[3], 50, &s);
    if (rc != PG_OK) {
        fprintf(stderr, "durable: %s (%s)\n", pg_last_error(), pg_status_name(rc));
        return 1;
    }
    printf("subscribed\n");
    fflush(stdout);
    state st = {0};
    int failed = 0;
    double last = now_s();
    while (st.count < want && !failed) {
        uint64_t before = st.count;
        rc = pg_merging_subscriber_poll(s, on_message, &st, want - st.count);
        if (rc < 0) {
            fprintf(stderr, "durable: poll: %s\n", pg_last_error());
            failed = 1;
        }
        pg_merge_event e;
        while (pg_merging_subscriber_next_event(s, &e) == 1) {
            switch (e.kind) {
            case PG_MERGE_SEAM:
                printf("SEAM live from %" PRIu64 ", %" PRIu64 " recorded\n", e.to, e.recorded);
                break;
            case PG_MERGE_RECOVERED:
                printf("RECOVERED %" PRIu64 " to %" PRIu64 "\n", e.from, e.to);
                break;
            case PG_MERGE_GAP:
                printf("GAP %" PRIu64 " to %" PRIu64 ": %s\n", e.from, e.to, e.reason);
                failed = 1;
                break;
            case PG_MERGE_CAUGHT_UP:
                printf("CAUGHT UP to %" PRIu64 "\n", e.to);
                break;
            default: break;
            }
        }
        fflush(stdout);
        if (st.count > before) {
            last = now_s();
        } else if (now_s() - last > 20.0) {
            fprintf(stderr, "durable: 20 s without a message (%" PRIu64 " of %" PRIu64 ")\n",
                    st.count, want);
            failed = 1;
        } else {
            struct timespec pause = {0, 200000};
            nanosleep(&pause, NULL);
        }
    }
    /* Freeing a durable subscriber keeps its position. */
    rc = pg_merging_subscriber_free(s);
    if (rc != PG_OK) {
        fprintf(stderr, "durable: free: %s\n", pg_last_error());
        failed = 1;
    }
    pg_context_free(ctx);
    return failed;
}
