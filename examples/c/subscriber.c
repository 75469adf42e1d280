/*
 * subscriber: receives COUNT messages on TOPIC, checking every byte, then exits.
 *
 *   subscriber URI TOPIC COUNT
 *
 * URI is a transport, or "-" to subscribe by topic name (TOPIC may then be a glob: md.*).
 * Each message must carry the next number in its first 8 bytes and the pattern of
 * publisher.c after them; a loss event, a wrong byte or 20 s without a message is a failure.
 */
#define _POSIX_C_SOURCE 200809L
#include <peregrine.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    uint64_t expected; /* the next message's number */
    uint64_t bytes;
    int bad;
} state;

static void on_message(void *user, const pg_message *m) {
    state *s = user;
    uint64_t i = 0;
    if (m->length < 8) {
        s->bad = 1;
        return;
    }
    for (int b = 0; b < 8; b++) i |= (uint64_t)m->payload[b] << (8 * b);
    if (i != s->expected) s->bad = 1;
    for (size_t k = 8; k < m->length; k++)
        if (m->payload[k] != (uint8_t)(i + k)) s->bad = 1;
    if (s->bad)
        fprintf(stderr, "subscriber: message %llu (sequence %llu, %zu bytes) is wrong\n",
                (unsigned long long)s->expected, (unsigned long long)m->sequence, m->length);
    s->expected++;
    s->bytes += m->length;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s URI TOPIC COUNT\n", argv[0]);
        return 2;
    }
    const char *uri = argv[1], *topic = argv[2];
    uint64_t count = strtoull(argv[3], NULL, 10);

    pg_context *ctx = NULL;
    pg_subscriber *sub = NULL;
    int32_t rc = pg_context_from_env(&ctx);
    if (rc == PG_OK)
        rc = strcmp(uri, "-") == 0 ? pg_subscribe(ctx, topic, PG_IDLE_BACKOFF, &sub)
                                   : pg_subscriber_new(ctx, topic, uri, PG_IDLE_BACKOFF, &sub);
    if (rc != PG_OK) {
        fprintf(stderr, "subscriber: %s (%s)\n", pg_last_error(), pg_status_name(rc));
        return 1;
    }
    printf("ready\n"); /* the test starts the publisher after this line */
    fflush(stdout);

    state s = {0, 0, 0};
    double last = now_s();
    while (s.expected < count && !s.bad) {
        int32_t n = pg_subscriber_poll(sub, on_message, &s, 256);
        if (n < 0) {
            fprintf(stderr, "subscriber: poll: %s\n", pg_last_error());
            return 1;
        }
        pg_event ev;
        while (pg_subscriber_next_event(sub, &ev) == 1) {
            if (ev.kind == PG_EVENT_LOST) {
                fprintf(stderr, "subscriber: lost %llu messages from %llu\n",
                        (unsigned long long)ev.count, (unsigned long long)ev.sequence);
                return 1;
            }
            if (ev.kind == PG_EVENT_SOURCE_FOUND)
                fprintf(stderr, "subscriber: found %s at %s\n", ev.topic, ev.uri);
        }
        if (n > 0) last = now_s();
        else if (now_s() - last > 20.0) {
            fprintf(stderr, "subscriber: nothing for 20 s after %llu messages\n",
                    (unsigned long long)s.expected);
            return 1;
        }
        pg_subscriber_idle(sub, n);
    }
    pg_subscriber_counters c;
    pg_subscriber_get_counters(sub, &c);
    printf("received %llu messages, %llu bytes, lost %llu\n", (unsigned long long)s.expected,
           (unsigned long long)s.bytes, (unsigned long long)c.lost);
    pg_subscriber_free(sub);
    pg_context_free(ctx);
    return s.bad || c.lost != 0 ? 1 : 0;
}
