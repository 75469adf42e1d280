/*
 * md_post: posts a price to an item in C. Logs in to a distributor, posts BID = MANTISSA x
 * 10^EXPONENT to ITEM of SERVICE, waits for the one PG_MD_ACK that answers the post, and
 * prints `ACK ITEM accepted` (exit 0) or `NACK ITEM CODE: TEXT` (exit 1).
 *
 *   md_post HOST:PORT USER TOKEN SERVICE ITEM MANTISSA EXPONENT
 *
 * A refused login or 20 s without the answer is a failure (exit 2).
 */
#define _POSIX_C_SOURCE 200809L
#include <peregrine.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint32_t post_id;
    int answered;
    int accepted;
} state;

static const char *code_name(int32_t c) {
    switch (c) {
    case PG_MD_ACCEPTED: return "accepted";
    case PG_MD_REFUSED: return "refused";
    case PG_MD_NOT_ENTITLED_TO_POST: return "not-entitled";
    case PG_MD_SERVICE_DOWN: return "service-down";
    case PG_MD_UNKNOWN_SERVICE: return "unknown-service";
    case PG_MD_BUSY: return "busy";
    case PG_MD_TIMEOUT: return "timeout";
    case PG_MD_INVALID: return "invalid";
    default: return "?";
    }
}

static void on_event(void *user, const pg_md_event *e) {
    state *s = user;
    if (e->kind != PG_MD_ACK || e->request != s->post_id) return;
    s->answered = 1;
    s->accepted = e->state == PG_MD_ACCEPTED;
    if (s->accepted)
        printf("ACK %.*s accepted\n", (int)e->item_length, e->item);
    else
        printf("NACK %.*s %s: %.*s\n", (int)e->item_length, e->item, code_name(e->state),
               (int)e->text_length, e->text);
}

int main(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: %s HOST:PORT USER TOKEN SERVICE ITEM MANTISSA EXPONENT\n", argv[0]);
        return 2;
    }
    const char *addr = argv[1];
    pg_md_consumer *c = NULL;
    int32_t rc = pg_md_consumer_new(&addr, 1, argv[2], argv[3], &c);
    if (rc != PG_OK) {
        fprintf(stderr, "md_post: %s (%s)\n", pg_last_error(), pg_status_name(rc));
        return 2;
    }
    pg_md_field bid;
    memset(&bid, 0, sizeof bid);
    bid.name = "BID"; /* by the distributor's dictionary */
    bid.type = PG_MD_PRICE;
    bid.int_value = strtoll(argv[6], NULL, 10);
    bid.exponent = (int32_t)strtol(argv[7], NULL, 10);
    state s = {0, 0, 0};
    rc = pg_md_consumer_post(c, argv[4], argv[5], &bid, 1, 0, &s.post_id);
    if (rc != PG_OK) {
        fprintf(stderr, "md_post: %s (%s)\n", pg_last_error(), pg_status_name(rc));
        return 2;
    }
    for (int waited_ms = 0; !s.answered && waited_ms < 20000; waited_ms += 100) {
        rc = pg_md_consumer_poll(c, 100, on_event, &s);
        if (rc < 0) {
            fprintf(stderr, "md_post: %s (%s)\n", pg_last_error(), pg_status_name(rc));
            return 2;
        }
    }
    fflush(stdout);
    pg_md_consumer_free(c);
    if (!s.answered) {
        fprintf(stderr, "md_post: no answer in 20 s\n");
        return 2;
    }
    return s.accepted ? 0 : 1;
}
