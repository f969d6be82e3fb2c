/* `ditrun launch`: one process per rank on this host, and `ditrun rendezvous-selftest`, the
 * hidden command that the launch tests run in each rank. */
#ifndef DIT_RUNTIME_LAUNCH_LAUNCH_CMD_H
#define DIT_RUNTIME_LAUNCH_LAUNCH_CMD_H

#ifdef __cplusplus
extern "C" {
#endif

/* The exit status of a rank that stops because another rank failed. Several ranks may end
 * within one moment; the launcher names as the cause a rank that ended otherwise. */
#define DIT_EXIT_PEER_FAILED 86

/* argv holds what follows "launch": -n N [--port P] [--grace-ms MS] -- COMMAND ARGS...
 * Runs N copies of this binary with COMMAND ARGS and torchrun's variables set (RANK,
 * WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT; without
 * --port a free port, also given as DIT_RDZV_PORT; with it, the rendezvous takes P + 1).
 * Each child's stderr lines come out prefixed "[rank i] ". When a child fails the others get
 * SIGTERM, then SIGKILL after the grace period (default 3000 ms); when the first to end stopped
 * because another failed (DIT_EXIT_PEER_FAILED), the others are first given up to 2 s (at most
 * the grace period) to end by themselves, so that the failed one is named. Returns the exit status:
 * 0 when every rank succeeded, 1 naming the first rank that failed and how, 2 on bad usage. */
int dit_launch_main(int argc, char **argv);

/* argv holds what follows "rendezvous-selftest": [--fail-rank R] [--fail-how report|exit]
 * [--exit-after-ms MS] [--hold-ms MS] [--timeout-ms MS] [--late-ms MS] [--tag ANY]. Every rank
 * but 0 waits --late-ms before it starts (so a test can reach rank 0 first). Meets the other
 * ranks, prints "rank I of N: payload P" on stdout; rank R then fails (reports it, or just
 * exits) with status 3, --exit-after-ms after that, and the others wait up to MS (default 0, 10000 with --fail-rank) to hear of a
 * failure, exiting DIT_EXIT_PEER_FAILED with its message if they do. */
int dit_rendezvous_selftest_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif
#endif
