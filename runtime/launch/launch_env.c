/* Reads rank, world and rendezvous address from torchrun, Slurm or Open MPI, and checks a
 * launch against the bundle's topology and the host's GPUs. */
#include "runtime/launch/launch_env.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/sha256.h"

/* Far above any real job, low enough that sums and products of these never overflow. */
#define MAX_RANKS (1 << 20)

const char *dit_launcher_name(dit_launcher_t l) {
  switch (l) {
    case DIT_LAUNCHER_TORCHRUN: return "torchrun";
    case DIT_LAUNCHER_SLURM: return "Slurm";
    case DIT_LAUNCHER_OPENMPI: return "Open MPI";
    default: return "no launcher";
  }
}

static int is_set(const char *name) {
  const char *v = getenv(name);
  return v != NULL;
}

/* A non-negative decimal below `limit`. *out is left alone when the variable is unset and
 * `required` is 0. */
static dit_status_t env_int(const char *name, const char *launcher, int required, long limit,
                            int *out) {
  const char *v = getenv(name);
  if (!v) {
    if (!required) return DIT_OK;
    return DIT_ERR(INVALID_ARGUMENT, "environment: %s is not set (%s sets it for every process)",
                   name, launcher);
  }
  /* strtol would skip leading blanks and accept a sign; a launcher never writes either. */
  int digits = v[0] != 0;
  for (const char *p = v; *p; p++) digits &= isdigit((unsigned char)*p) != 0;
  if (!digits)
    return DIT_ERR(INVALID_ARGUMENT, "environment: %s='%.64s' (%s): expected a non-negative integer",
                   name, v, launcher);
  errno = 0;
  long n = strtol(v, NULL, 10);
  if (errno || n >= limit)
    return DIT_ERR(INVALID_ARGUMENT, "environment: %s='%.64s' (%s): must be below %ld", name, v,
                   launcher, limit);
  *out = (int)n;
  return DIT_OK;
}

static dit_status_t set_addr(dit_launch_env_t *e, const char *var, const char *v) {
  size_t n = strlen(v);
  if (n == 0 || n >= sizeof e->addr)
    return DIT_ERR(INVALID_ARGUMENT, "environment: %s='%.64s': expected a host name or address of 1 to %zu characters",
                   var, v, sizeof e->addr - 1);
  memcpy(e->addr, v, n + 1);
  e->addr_var = var;
  return DIT_OK;
}

/* The first of `vars` that is set gives the address; with none set, a multi-rank launch has
 * no way to find rank 0. */
static dit_status_t pick_addr(dit_launch_env_t *e, const char *const *vars, int n) {
  for (int i = 0; i < n; i++) {
    const char *v = getenv(vars[i]);
    if (v) return set_addr(e, vars[i], v);
  }
  if (e->world == 1) return DIT_OK;
  return DIT_ERR(INVALID_ARGUMENT, "environment: %s launch of %d ranks: %s is not set, so the ranks cannot find rank 0",
                 dit_launcher_name(e->launcher), e->world, vars[0]);
}

static dit_status_t read_port(dit_launch_env_t *e) {
  const char *launcher = dit_launcher_name(e->launcher);
  int p = 0;
  if (is_set("DIT_RDZV_PORT")) {
    DIT_RETURN_IF(env_int("DIT_RDZV_PORT", launcher, 1, 65536, &p));
    if (p == 0) return DIT_ERR(INVALID_ARGUMENT, "environment: DIT_RDZV_PORT='0': expected a port in 1..65535");
    e->port = p;
    e->port_var = "DIT_RDZV_PORT";
    return DIT_OK;
  }
  if (is_set("MASTER_PORT")) {
    DIT_RETURN_IF(env_int("MASTER_PORT", launcher, 1, 65536, &p));
    /* MASTER_PORT is torchrun's own store; the one above it is ours. */
    if (p == 0 || p == 65535)
      return DIT_ERR(INVALID_ARGUMENT, "environment: MASTER_PORT='%d': the rendezvous uses MASTER_PORT + 1, which must be a port in 1..65535 (or set DIT_RDZV_PORT)",
                     p);
    e->port = p + 1;
    e->port_var = "MASTER_PORT";
    return DIT_OK;
  }
  e->port = DIT_RDZV_DEFAULT_PORT;
  return DIT_OK;
}

/* Far above any secret a person writes, low enough to read into memory at once. */
#define SECRET_FILE_MAX (64 << 10)

static dit_status_t keep_secret(dit_launch_env_t *e, const char *var, const char *shown, const unsigned char *p, size_t n) {
  if (n < DIT_LAUNCH_SECRET_MIN)
    return DIT_ERR(INVALID_ARGUMENT, "environment: %s%s holds a job secret of %zu bytes, at least %d are needed (e.g. 32 random bytes in hex)",
                   var, shown, n, DIT_LAUNCH_SECRET_MIN);
  if (n > DIT_LAUNCH_SECRET_MAX) {
    dit_sha256_digest(p, n, e->secret);
    e->secret_len = DIT_SHA256_BYTES;
  } else {
    memcpy(e->secret, p, n);
    e->secret_len = n;
  }
  e->secret_var = var;
  return DIT_OK;
}

static dit_status_t read_secret_file(dit_launch_env_t *e, const char *path) {
  char shown[300];
  snprintf(shown, sizeof shown, "='%.256s'", path);
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0)
    return DIT_ERR(NOT_FOUND, "environment: DIT_JOB_SECRET_FILE='%.256s': cannot open the job secret: %s", path, strerror(errno));
  struct stat st;
  dit_status_t s = DIT_OK;
  if (fstat(fd, &st))
    s = DIT_ERR(IO, "environment: DIT_JOB_SECRET_FILE='%.256s': %s", path, strerror(errno));
  else if (!S_ISREG(st.st_mode))
    s = DIT_ERR(INVALID_ARGUMENT, "environment: DIT_JOB_SECRET_FILE='%.256s' is not a regular file", path);
  else if (st.st_mode & 077)
    s = DIT_ERR(FAILED_PRECONDITION, "environment: DIT_JOB_SECRET_FILE='%.256s': permissions %04o are too open: a job secret must be "
                "readable by its owner only (chmod 600 '%.256s')", path, (unsigned)(st.st_mode & 07777), path);
  else if (st.st_size > SECRET_FILE_MAX)
    s = DIT_ERR(OUT_OF_RANGE, "environment: DIT_JOB_SECRET_FILE='%.256s' has %lld bytes, a job secret has at most %d", path,
                (long long)st.st_size, SECRET_FILE_MAX);
  unsigned char *buf = s ? NULL : malloc(SECRET_FILE_MAX + 1);
  if (!s && !buf) s = DIT_ERR(RESOURCE_EXHAUSTED, "environment: out of memory reading DIT_JOB_SECRET_FILE");
  size_t n = 0;
  while (!s && n <= SECRET_FILE_MAX) {
    ssize_t r = read(fd, buf + n, SECRET_FILE_MAX + 1 - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) s = DIT_ERR(IO, "environment: DIT_JOB_SECRET_FILE='%.256s': %s", path, strerror(errno));
    if (r <= 0) break;
    n += (size_t)r;
  }
  close(fd);
  if (!s && n > SECRET_FILE_MAX)
    s = DIT_ERR(OUT_OF_RANGE, "environment: DIT_JOB_SECRET_FILE='%.256s' grew past %d bytes while being read", path, SECRET_FILE_MAX);
  if (!s) s = keep_secret(e, "DIT_JOB_SECRET_FILE", shown, buf, n);
  if (buf) {
    dit_crypto_wipe(buf, n);
    free(buf);
  }
  return s;
}

/* Only a world of more than one rank has peers to prove anything to. */
static dit_status_t read_secret(dit_launch_env_t *e) {
  const char *v = getenv("DIT_JOB_SECRET"), *f = getenv("DIT_JOB_SECRET_FILE");
  if (v && f)
    return DIT_ERR(INVALID_ARGUMENT, "environment: both DIT_JOB_SECRET and DIT_JOB_SECRET_FILE are set: set one of them (the same on every rank)");
  if (v) return keep_secret(e, "DIT_JOB_SECRET", "", (const unsigned char *)v, strlen(v));
  if (f) return read_secret_file(e, f);
  return DIT_ERR(INVALID_ARGUMENT, "environment: %s launch of %d ranks without a job secret: set DIT_JOB_SECRET (a value) or "
                 "DIT_JOB_SECRET_FILE (a file only its owner can read) to the same secret on every rank, so that the ranks admit "
                 "only each other (`ditrun launch` makes one up itself)", dit_launcher_name(e->launcher), e->world);
}

static dit_status_t read_listen_fd(dit_launch_env_t *e) {
  const char *v = getenv("DIT_RDZV_LISTEN_FD");
  if (!v || e->rank != 0) return DIT_OK;
  int fd = -1;
  DIT_RETURN_IF(env_int("DIT_RDZV_LISTEN_FD", "ditrun launch", 1, 1 << 20, &fd));
  if (fd <= 2) return DIT_ERR(INVALID_ARGUMENT, "environment: DIT_RDZV_LISTEN_FD='%s': expected a descriptor above 2", v);
  e->rdzv_listen_fd = fd;
  return DIT_OK;
}

dit_status_t dit_launch_env_read(dit_launch_env_t *out) {
  dit_launch_env_t e;
  memset(&e, 0, sizeof e);
  e.world = 1;
  e.local_world = -1;
  e.rank_var = e.world_var = e.local_rank_var = e.addr_var = e.port_var = e.secret_var = "";
  e.rdzv_listen_fd = -1;
  strcpy(e.addr, "127.0.0.1");

  const char *rank_var = NULL, *world_var = NULL, *local_var = NULL, *local_world_var = NULL;
  const char *addr_vars[2] = {0};
  int n_addr = 0;
  if (is_set("RANK") || is_set("WORLD_SIZE")) {
    e.launcher = DIT_LAUNCHER_TORCHRUN;
    rank_var = "RANK", world_var = "WORLD_SIZE", local_var = "LOCAL_RANK", local_world_var = "LOCAL_WORLD_SIZE";
    addr_vars[n_addr++] = "MASTER_ADDR";
  } else if (is_set("OMPI_COMM_WORLD_RANK") || is_set("OMPI_COMM_WORLD_SIZE")) {
    e.launcher = DIT_LAUNCHER_OPENMPI;
    rank_var = "OMPI_COMM_WORLD_RANK", world_var = "OMPI_COMM_WORLD_SIZE";
    local_var = "OMPI_COMM_WORLD_LOCAL_RANK", local_world_var = "OMPI_COMM_WORLD_LOCAL_SIZE";
    addr_vars[n_addr++] = "DIT_MASTER_ADDR";
  } else if (is_set("SLURM_PROCID") || is_set("SLURM_NTASKS")) {
    e.launcher = DIT_LAUNCHER_SLURM;
    rank_var = "SLURM_PROCID", world_var = "SLURM_NTASKS", local_var = "SLURM_LOCALID";
    addr_vars[n_addr++] = "DIT_MASTER_ADDR";
    addr_vars[n_addr++] = "SLURM_LAUNCH_NODE_IPADDR";
  }

  if (e.launcher != DIT_LAUNCHER_NONE) {
    const char *ln = dit_launcher_name(e.launcher);
    DIT_RETURN_IF(env_int(world_var, ln, 1, MAX_RANKS, &e.world));
    DIT_RETURN_IF(env_int(rank_var, ln, 1, MAX_RANKS, &e.rank));
    DIT_RETURN_IF(env_int(local_var, ln, 1, MAX_RANKS, &e.local_rank));
    if (local_world_var) DIT_RETURN_IF(env_int(local_world_var, ln, 0, MAX_RANKS, &e.local_world));
    e.rank_var = rank_var, e.world_var = world_var, e.local_rank_var = local_var;
    if (e.world == 0)
      return DIT_ERR(INVALID_ARGUMENT, "environment: %s='0' (%s): a launch has at least one rank", world_var, ln);
    if (e.rank >= e.world)
      return DIT_ERR(INVALID_ARGUMENT, "environment: %s='%d' (%s) is not below %s='%d'", rank_var, e.rank, ln,
                     world_var, e.world);
    if (e.local_world == 0 || e.local_world > e.world)
      return DIT_ERR(INVALID_ARGUMENT, "environment: %s='%d' (%s): expected 1..%s='%d'", local_world_var,
                     e.local_world, ln, world_var, e.world);
    if (e.local_rank >= e.world || (e.local_world > 0 && e.local_rank >= e.local_world)) {
      int lim = e.local_world > 0 ? e.local_world : e.world;
      return DIT_ERR(INVALID_ARGUMENT, "environment: %s='%d' (%s) is not below %s='%d'", local_var, e.local_rank,
                     ln, e.local_world > 0 ? local_world_var : world_var, lim);
    }
    DIT_RETURN_IF(pick_addr(&e, addr_vars, n_addr));
  }
  DIT_RETURN_IF(read_port(&e));
  if (e.world > 1) {
    DIT_RETURN_IF(read_secret(&e));
    DIT_RETURN_IF(read_listen_fd(&e));
  }
  *out = e;
  dit_crypto_wipe(&e, sizeof e);
  return DIT_OK;
}

dit_status_t dit_launch_check_topology(const dit_manifest_t *m, const dit_launch_env_t *e) {
  const char *how = e->launcher == DIT_LAUNCHER_NONE ? "no launcher: a single process" : NULL;
  char buf[96];
  if (!how) {
    snprintf(buf, sizeof buf, "%s from %s", e->world_var && e->world_var[0] ? e->world_var : "world size",
             dit_launcher_name(e->launcher));
    how = buf;
  }
  if (e->world < 1 || e->rank < 0 || e->rank >= e->world || e->local_rank < 0 || e->local_rank >= e->world)
    return DIT_ERR(INVALID_ARGUMENT, "launch: rank %d, local rank %d, world %d (%s) are inconsistent", e->rank,
                   e->local_rank, e->world, how);
  if (m->topology.world != e->world)
    return DIT_ERR(FAILED_PRECONDITION, "manifest.json: field 'topology.world': the bundle needs %d rank%s, this launch has %d (%s)",
                   m->topology.world, m->topology.world == 1 ? "" : "s", e->world, how);
  /* A parsed manifest lists every rank once; a hand-built one may not, and a rank without a
   * plan would fail later, after the others had allocated. */
  for (size_t i = 0; i < m->n_ranks; i++)
    if (m->ranks[i].rank == e->rank) return DIT_OK;
  return DIT_ERR(FAILED_PRECONDITION, "manifest.json: field 'ranks': no plan for rank %d of %d (%s)", e->rank,
                 e->world, how);
}

/* Number of comma-separated entries, 0 for an empty or unset list. */
static int count_list(const char *s) {
  if (!s || !s[0]) return 0;
  int n = 1;
  for (; *s; s++) n += *s == ',';
  return n;
}

dit_status_t dit_launch_pick_device(const dit_launch_env_t *e, int device_count, const char *visible_devices,
                                    int *out_device) {
  const char *lr = e->local_rank_var && e->local_rank_var[0] ? e->local_rank_var : "local rank";
  if (device_count <= 0)
    return DIT_ERR(FAILED_PRECONDITION, "rank %d: this host has no visible GPU%s%s%s", e->rank,
                   visible_devices ? " (CUDA_VISIBLE_DEVICES='" : "", visible_devices ? visible_devices : "",
                   visible_devices ? "')" : "");
  if (count_list(visible_devices) == 1) {
    *out_device = 0;
    return DIT_OK;
  }
  if (e->local_rank < 0 || e->local_rank >= device_count)
    return DIT_ERR(FAILED_PRECONDITION, "rank %d: %s=%d (%s) but this host has %d visible GPU%s: more ranks on this host than GPUs",
                   e->rank, lr, e->local_rank, dit_launcher_name(e->launcher), device_count,
                   device_count == 1 ? "" : "s");
  *out_device = e->local_rank;
  return DIT_OK;
}
