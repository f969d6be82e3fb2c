/* Where this process stands in a multi-process launch: rank, world size, local rank and the
 * rendezvous address, read from the launcher's environment; and the checks that a launch fits
 * the bundle (and the host's GPUs) before anything is allocated. */
#ifndef DIT_RUNTIME_LAUNCH_LAUNCH_ENV_H
#define DIT_RUNTIME_LAUNCH_LAUNCH_ENV_H

#include "artifacts/manifest.h"
#include "base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dit_launcher {
  DIT_LAUNCHER_NONE = 0, /* no launcher: one process, rank 0 of 1 */
  DIT_LAUNCHER_TORCHRUN = 1,
  DIT_LAUNCHER_SLURM = 2,
  DIT_LAUNCHER_OPENMPI = 3,
} dit_launcher_t;

#define DIT_RDZV_DEFAULT_PORT 29511
#define DIT_LAUNCH_ADDR_MAX 256
/* HMAC hashes a longer key first; a secret over this size is kept as its SHA-256, which
 * gives the same MACs. */
#define DIT_LAUNCH_SECRET_MAX 64
#define DIT_LAUNCH_SECRET_MIN 16

/* A plain value: tests and callers may fill it by hand. The *_var fields name the variables
 * the values came from (static strings), so errors can say which setting to fix. */
typedef struct dit_launch_env {
  dit_launcher_t launcher;
  int rank, world, local_rank;
  int local_world; /* ranks on this host; -1 when the launcher does not say */
  const char *rank_var, *world_var, *local_rank_var;
  char addr[DIT_LAUNCH_ADDR_MAX]; /* rank 0's host (rendezvous); "127.0.0.1" when alone */
  int port;                        /* the rendezvous port */
  const char *addr_var, *port_var; /* "" when a default was taken */
  /* The job secret every rank proves to the others; secret_len 0 when none was set. */
  unsigned char secret[DIT_LAUNCH_SECRET_MAX];
  size_t secret_len;
  const char *secret_var; /* "DIT_JOB_SECRET" or "DIT_JOB_SECRET_FILE"; "" when none */
  /* > 2: rank 0's rendezvous listener, already bound to addr:port and inherited from `ditrun
   * launch` (DIT_RDZV_LISTEN_FD), so no other process can take the port in between; else
   * rank 0 binds its own. */
  int rdzv_listen_fd;
} dit_launch_env_t;

/* Reads the environment. Precedence, most specific first, because launchers nest (torchrun
 * started by srun inside a Slurm allocation, mpirun inside one) and the innermost launcher
 * describes this very process:
 *   1. torchrun, when RANK or WORLD_SIZE is set: RANK, WORLD_SIZE, LOCAL_RANK,
 *      LOCAL_WORLD_SIZE (optional), MASTER_ADDR (required when WORLD_SIZE > 1);
 *   2. Open MPI, when OMPI_COMM_WORLD_RANK or _SIZE is set: OMPI_COMM_WORLD_RANK, _SIZE,
 *      _LOCAL_RANK, _LOCAL_SIZE (optional); address from DIT_MASTER_ADDR;
 *   3. Slurm, when SLURM_PROCID or SLURM_NTASKS is set: SLURM_PROCID, SLURM_NTASKS,
 *      SLURM_LOCALID; address from DIT_MASTER_ADDR, else SLURM_LAUNCH_NODE_IPADDR (the node
 *      srun ran on, which in a batch job is the first node, the one holding task 0);
 *   4. none of them: rank 0 of 1.
 * Rendezvous port: DIT_RDZV_PORT if set, else MASTER_PORT + 1 (MASTER_PORT itself is
 * torchrun's store), else DIT_RDZV_DEFAULT_PORT.
 * Job secret (read only for a world of more than one rank, which needs it): DIT_JOB_SECRET
 * (its value) or DIT_JOB_SECRET_FILE (the file's bytes, verbatim); at least
 * DIT_LAUNCH_SECRET_MIN bytes; a file that group or others may access is refused, as ssh
 * refuses such a key; setting both, or neither, is INVALID_ARGUMENT saying what to set.
 * Missing, non-numeric, negative or inconsistent values (rank >= world, local rank >= local
 * world, a port outside 1..65535) give INVALID_ARGUMENT naming the variable and its value. */
dit_status_t dit_launch_env_read(dit_launch_env_t *out);

/* "torchrun", "Slurm", "Open MPI", "no launcher". */
const char *dit_launcher_name(dit_launcher_t l);

/* A process-per-rank launch must match the bundle: world size == topology.world and the
 * manifest has a plan for this rank; otherwise FAILED_PRECONDITION naming the manifest field,
 * both values and the launcher's variable. Call it before allocating anything. (The CPU
 * backend's in-process ranks, one process for the whole world, do not go through it.) */
dit_status_t dit_launch_check_topology(const dit_manifest_t *m, const dit_launch_env_t *e);

/* The GPU ordinal for this rank on a host with device_count visible GPUs. visible_devices is
 * CUDA_VISIBLE_DEVICES (may be NULL): when it lists exactly one device the launcher has bound
 * each process to its own GPU, which is then ordinal 0; otherwise the ordinal is the local
 * rank, and a local rank with no GPU of its own is FAILED_PRECONDITION (two ranks on one GPU
 * would only thrash). */
dit_status_t dit_launch_pick_device(const dit_launch_env_t *e, int device_count,
                                    const char *visible_devices, int *out_device);

#ifdef __cplusplus
}
#endif
#endif
