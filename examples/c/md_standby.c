/*
 * md_standby: a market data consumer with a warm standby, in C. Logs in to ACTIVE and, paused,
 * to STANDBY (pg_md_consumer_new_warm), opens ITEMs of SERVICE, and prints one line per event
 * (REFRESH ITEM seq=N, UPDATE ITEM seq=N, STATUS ITEM STATE "TEXT", DISCONNECTED "REASON"),
 * then STANDING BY once the standby holds every image the active has and FAILED OVER each
 * time the standby takes over. Exits 0 once an item's REFRESH or UPDATE carries item_seq
 * LAST (or later), printing the standby's counters.
 *
 *   md_standby ACTIVE STANDBY USER TOKEN SERVICE LAST ITEM...
 *
 * A refused login or 20 s without an event is a failure (exit 1).
 */
#define _POSIX_C_SOURCE 200809L
#include <peregrine.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    uint32_t last; /* the item_seq to stop at */
    int done;
} state;

static void on_event(void *user, const pg_md_event *e) {
    state *s = user;
    switch (e->kind) {
    case PG_MD_REFRESH:
    case PG_MD_UPDATE:
        printf("%s %.*s seq=%u\n", e->kind == PG_MD_REFRESH ? "REFRESH" : "UPDATE",
               (int)e->item_length, e->item, e->item_seq);
        if (e->item_seq >= s->last) s->done = 1;
        break;
    case PG_MD_STATUS:
        printf("STATUS %.*s %s \"%.*s\"\n", (int)e->item_length, e->item,
               e->state == PG_MD_OK ? "ok" : e->state == PG_MD_STALE ? "stale" : "other",
               (int)e->text_length, e->text);
        break;
    case PG_MD_DISCONNECTED:
        printf("DISCONNECTED \"%.*s\"\n", (int)e->text_length, e->text);
        break;
    default: break;
    }
}

int main(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: %s ACTIVE STANDBY USER TOKEN SERVICE LAST ITEM...\n", argv[0]);
        return 2;
    }
    pg_md_consumer *c = NULL;
    int32_t rc = pg_md_consumer_new_warm(argv[1], argv[2], argv[3], argv[4], &c);
    if (rc != PG_OK) {
        fprintf(stderr, "md_standby: %s (%s)\n", pg_last_error(), pg_status_name(rc));
        return 1;
    }
    /* Pausing by hand is the standby's own business: refused, naming why. */
    if (pg_md_consumer_pause(c, 0) != PG_ERROR_INVALID_ARGUMENT) {
        fprintf(stderr, "md_standby: pause was not refused\n");
        return 1;
    }
    rc = pg_md_consumer_open(c, argv[5], (const char *const *)&argv[7], (size_t)(argc - 7),
                             NULL);
    if (rc != PG_OK) {
        fprintf(stderr, "md_standby: open: %s\n", pg_last_error());
        return 1;
    }
    state s = {(uint32_t)strtoul(argv[6], NULL, 10), 0};
    pg_md_standby standby = {0};
    int standing_by = 0;
    uint64_t failovers = 0;
    int idle_s = 0;
    while (!s.done) {
        int32_t n = pg_md_consumer_poll(c, 1000, on_event, &s);
        if (n < 0) {
            fprintf(stderr, "md_standby: poll: %s\n", pg_last_error());
            return 1;
        }
        pg_md_consumer_standby(c, &standby);
        if (standby.standing_by && !standing_by) printf("STANDING BY\n");
        standing_by = standby.standing_by;
        for (; failovers < standby.failovers; failovers++) printf("FAILED OVER\n");
        fflush(stdout);
        idle_s = n == 0 ? idle_s + 1 : 0;
        if (idle_s >= 20) {
            fprintf(stderr, "md_standby: 20 s without an event\n");
            return 1;
        }
    }
    printf("failovers=%" PRIu64 " duplicates_dropped=%" PRIu64 "\n", standby.failovers,
           standby.duplicates_dropped);
    pg_md_consumer_free(c);
    return 0;
}
