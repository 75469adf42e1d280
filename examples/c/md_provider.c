/*
 * md_provider: a market data provider in C. Publishes ITEM of SERVICE on BACKBONE: a refresh
 * (BID, ASK, BIDSIZE, DSPLY_NAME), then COUNT updates of BID (189.2101, 189.2102, ...), one
 * every 10 ms, answering image requests all along; then keeps answering them for SECONDS.
 * Clients' posts are published as updates of their items (`post ITEM from USER: published`,
 * or why not).
 *
 *   md_provider BACKBONE REQUESTS SERVICE ITEM COUNT SECONDS
 *
 * (REQUESTS "-": the backbone's port + 1.)
 */
#define _POSIX_C_SOURCE 200809L
#include <peregrine.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Publishes the posts that came (each an update, or a refresh, of its item) and accepts them;
 * one the provider cannot publish is refused to its poster with the reason. */
static void answer_posts(pg_md_provider *p) {
    pg_md_post post;
    while (pg_md_provider_poll_post(p, &post) == 1) {
        /* `post`'s pointers live until the next call on the provider: print them first. */
        printf("post %.*s from %.*s: ", (int)post.item_length, post.item, (int)post.user_length,
               post.user);
        int32_t rc = pg_md_provider_publish_post(p, post.id);
        printf("%s\n", rc == PG_OK ? "published" : pg_last_error());
        fflush(stdout);
    }
}

/* Waits `seconds`, answering image requests and posts. */
static void work_for(pg_md_provider *p, double seconds) {
    double end = now_s() + seconds;
    struct timespec ms = {0, 1000000};
    while (now_s() < end) {
        if (pg_md_provider_do_work(p) == 0) nanosleep(&ms, NULL);
        answer_posts(p);
    }
}

static int fail(const char *what, int32_t rc) {
    fprintf(stderr, "md_provider: %s: %s (%s)\n", what, pg_last_error(), pg_status_name(rc));
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: %s BACKBONE REQUESTS SERVICE ITEM COUNT SECONDS\n", argv[0]);
        return 2;
    }
    const char *requests = strcmp(argv[2], "-") == 0 ? NULL : argv[2];
    const char *item = argv[4];
    long count = strtol(argv[5], NULL, 10);
    double seconds = strtod(argv[6], NULL);

    pg_context *ctx = NULL;
    pg_md_provider *p = NULL;
    int32_t rc = pg_context_from_env(&ctx);
    if (rc == PG_OK) rc = pg_md_provider_new(ctx, argv[3], argv[1], requests, &p);
    if (rc != PG_OK) return fail("opening", rc);

    /* Fields by dictionary name (fid 0), prices as mantissa and exponent. */
    pg_md_field image[4];
    memset(image, 0, sizeof image);
    image[0].name = "BID";
    image[0].type = PG_MD_PRICE;
    image[0].int_value = 1892100;
    image[0].exponent = -4;
    image[1].name = "ASK";
    image[1].type = PG_MD_PRICE;
    image[1].int_value = 1892200;
    image[1].exponent = -4;
    image[2].name = "BIDSIZE";
    image[2].type = PG_MD_INT;
    image[2].int_value = 300;
    image[3].name = "DSPLY_NAME";
    image[3].type = PG_MD_STRING;
    image[3].string = "AAA INC";
    image[3].string_length = strlen("AAA INC");
    while ((rc = pg_md_provider_refresh(p, item, image, 4)) == PG_ERROR_BACK_PRESSURED)
        pg_md_provider_do_work(p);
    if (rc != PG_OK) return fail("refresh", rc);
    printf("ready\n");
    fflush(stdout);

    for (long i = 1; i <= count; i++) {
        pg_md_field bid;
        memset(&bid, 0, sizeof bid);
        bid.fid = 22; /* BID, by id */
        bid.type = PG_MD_PRICE;
        bid.int_value = 1892100 + i;
        bid.exponent = -4;
        while ((rc = pg_md_provider_update(p, item, &bid, 1)) == PG_ERROR_BACK_PRESSURED)
            pg_md_provider_do_work(p);
        if (rc != PG_OK) return fail("update", rc);
        work_for(p, 0.01);
    }
    /* A bad input is refused with the value named, and nothing is sent: BID is a price. */
    pg_md_field wrong;
    memset(&wrong, 0, sizeof wrong);
    wrong.name = "BID";
    wrong.type = PG_MD_INT;
    wrong.int_value = 5;
    rc = pg_md_provider_update(p, item, &wrong, 1);
    if (rc != PG_ERROR_INVALID_ARGUMENT) return fail("a BID given as an int was not refused", rc);
    printf("refused: %s\n", pg_last_error());
    /* Numbered by the application (A/B feeds: two providers of one stream number alike), an
     * update must come after the item's last item_seq: 0 is not after the last one, `count`. */
    wrong.type = PG_MD_PRICE;
    rc = pg_md_provider_update_numbered(p, item, &wrong, 1, 0);
    if (rc != PG_ERROR_INVALID_ARGUMENT) return fail("an item_seq going back was not refused", rc);
    printf("refused: %s\n", pg_last_error());
    printf("sent\n");
    fflush(stdout);
    work_for(p, seconds);
    pg_md_provider_free(p);
    pg_context_free(ctx);
    return 0;
}
