/* Launch environment: each launcher's variables, their precedence, the errors for bad values,
 * the rendezvous port rules, the job secret (value or owner-only file), the inherited
 * rendezvous listener, and the checks against the bundle topology and the GPUs. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "runtime/launch/launch_env.h"

static const char *const kVars[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "DIT_RDZV_PORT",
    "DIT_MASTER_ADDR", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_LAUNCH_NODE_IPADDR",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
    "DIT_JOB_SECRET", "DIT_JOB_SECRET_FILE", "DIT_RDZV_LISTEN_FD"};

#define SECRET "an example job secret"

/* Every multi-rank launch needs a secret; the tests of other settings take this one. */
static void clear_env(void) {
  for (size_t i = 0; i < sizeof kVars / sizeof kVars[0]; i++) unsetenv(kVars[i]);
  setenv("DIT_JOB_SECRET", SECRET, 1);
}

static void torchrun(const char *rank, const char *world, const char *local) {
  clear_env();
  setenv("RANK", rank, 1);
  setenv("WORLD_SIZE", world, 1);
  setenv("LOCAL_RANK", local, 1);
  setenv("MASTER_ADDR", "10.1.2.3", 1);
  setenv("MASTER_PORT", "29500", 1);
}

static void test_none(void) {
  clear_env();
  dit_launch_env_t e;
  CHECK_OK(dit_launch_env_read(&e));
  CHECK_EQ_INT(e.launcher, DIT_LAUNCHER_NONE);
  CHECK_EQ_INT(e.rank, 0);
  CHECK_EQ_INT(e.world, 1);
  CHECK_EQ_INT(e.local_rank, 0);
  CHECK_EQ_INT(e.port, DIT_RDZV_DEFAULT_PORT);
  CHECK(!strcmp(e.addr, "127.0.0.1"));
}

static void test_torchrun(void) {
  dit_launch_env_t e;
  torchrun("3", "4", "1");
  setenv("LOCAL_WORLD_SIZE", "2", 1);
  CHECK_OK(dit_launch_env_read(&e));
  CHECK_EQ_INT(e.launcher, DIT_LAUNCHER_TORCHRUN);
  CHECK_EQ_INT(e.rank, 3);
  CHECK_EQ_INT(e.world, 4);
  CHECK_EQ_INT(e.local_rank, 1);
  CHECK_EQ_INT(e.local_world, 2);
  CHECK(!strcmp(e.addr, "10.1.2.3"));
  CHECK(!strcmp(e.world_var, "WORLD_SIZE"));
  /* Never torchrun's own store port. */
  CHECK_EQ_INT(e.port, 29501);
  CHECK(!strcmp(e.port_var, "MASTER_PORT"));
  setenv("DIT_RDZV_PORT", "40000", 1);
  CHECK_OK(dit_launch_env_read(&e));
  CHECK_EQ_INT(e.port, 40000);
  unsetenv("MASTER_PORT");
  unsetenv("DIT_RDZV_PORT");
  CHECK_OK(dit_launch_env_read(&e));
  CHECK_EQ_INT(e.port, DIT_RDZV_DEFAULT_PORT);

  /* A single torchrun process needs no address. */
  torchrun("0", "1", "0");
  unsetenv("MASTER_ADDR");
  CHECK_OK(dit_launch_env_read(&e));
  CHECK_EQ_INT(e.world, 1);
}

static void test_torchrun_errors(void) {
  dit_launch_env_t e;
  torchrun("4", "4", "0");
  CHECK_ERR(dit_launch_env_read(&e), INVALID_ARGUMENT, "RANK='4' (torchrun) is not below WORLD_SIZE='4'");
  torchrun("-1", "4", "0");
  CHECK_ERR(dit_launch_env_read(&e), INVALID_ARGUMENT, "RANK='-1'");
  torchrun("two", "4", "0");
  CHECK_ERR(dit_launch_env_read(&e), INVALID_ARGUMENT, "RANK='two' (torchrun): expected a non-negative integer");
  torchrun("1", "4x", "0");
  CHECK_ERR(dit_launch_env_read(&e), INVALID_ARGUMENT, "WORLD_SIZE='4x'");
  torchrun("1", "", "0");
  CHECK_ERR(dit_launch_env_read(&e), INVALID_ARGUMENT, "WORLD_SIZE=''");
  torchrun("0", "0", "0");
  CHECK_ERR(dit_launch_env_read(&e), INVALID_ARGUMENT, "WORLD_SIZE='0'");
  torchrun("1", "4", " 1");
  CHECK_ERR(dit_launch_env_read(&e), INVALID_ARGUMENT, "LOCAL_RANK=' 1'");
  torchrun("1", "4", "1");
  unsetenv("LOCAL_RANK");
  CHECK_ERR(dit_launch_env_read(&e), INVALID_ARGUMENT, "LOCAL_RANK is not set");
  torchrun("1", "4", "0");
  unsetenv("WORLD_SIZE");
  CHECK_ERR(dit_launch_env_read(&e), INVALID_ARGUMENT, "WORLD_SIZE is not set");
  torchrun("1", "4", "2");
  setenv("LOCAL_WORLD_SIZE", "2", 1);
  CHECK_ERR(dit_launch_env_read(&e), INVALID_ARGUMENT, "LOCAL_RANK='2' (torchrun) is not below LOCAL_WORLD_SIZE='2'");
  torchrun("1", "4", "1");
  setenv("LOCAL_WORLD_SIZE", "8", 1);
  CHECK_ERR(dit_launch_env_read(&e), INVALID_ARGUMENT, "LOCAL_WORLD_SIZE='8'");
  torchrun("1", "4", "1");
  unsetenv("MASTER_ADDR");
  CHECK_ERR(dit_launch_env_read(&e), INVALID_ARGUMENT, "MASTER_ADDR is not set");
  torchrun("1", "4", "1");
  setenv("MASTER_PORT", "65535", 1);
  CHECK_ERR(dit_launch_env_read(&e), INVALID_ARGUMENT, "MASTER_PORT='65535'");
  torchrun("1", "4", "1");
  setenv("MASTER_PORT", "http", 1);
  CHECK_ERR(dit_launch_env_read(&e), INVALID_ARGUMENT, "MASTER_PORT='http'");
  torchrun("1", "4", "1");
  setenv("DIT_RDZV_PORT", "70000", 1);
  CHECK_ERR(dit_launch_env_read(&e), INVALID_ARGUMENT, "DIT_RDZV_PORT='70000'");
  torchrun("1", "4", "1");
  setenv("DIT_RDZV_PORT", "0", 1);
  CHECK_ERR(dit_launch_env_read(&e), INVALID_ARGUMENT, "DIT_RDZV_PORT='0'");
}

static void test_slurm(void) {
  dit_launch_env_t e;
  clear_env();
  setenv("SLURM_PROCID", "5", 1);
  setenv("SLURM_NTASKS", "8", 1);
  setenv("SLURM_LOCALID", "1", 1);
  setenv("SLURM_LAUNCH_NODE_IPADDR", "192.168.0.7", 1);
  CHECK_OK(dit_launch_env_read(&e));
  CHECK_EQ_INT(e.launcher, DIT_LAUNCHER_SLURM);
  CHECK_EQ_INT(e.rank, 5);
  CHECK_EQ_INT(e.world, 8);
  CHECK_EQ_INT(e.local_rank, 1);
  CHECK_EQ_INT(e.local_world, -1);
  CHECK(!strcmp(e.addr, "192.168.0.7"));
  setenv("DIT_MASTER_ADDR", "gpu-node-01", 1);
  CHECK_OK(dit_launch_env_read(&e));
  CHECK(!strcmp(e.addr, "gpu-node-01"));
  CHECK(!strcmp(e.addr_var, "DIT_MASTER_ADDR"));
  unsetenv("DIT_MASTER_ADDR");
  unsetenv("SLURM_LAUNCH_NODE_IPADDR");
  CHECK_ERR(dit_launch_env_read(&e), INVALID_ARGUMENT, "DIT_MASTER_ADDR is not set");
  setenv("DIT_MASTER_ADDR", "n1", 1);
  setenv("SLURM_PROCID", "8", 1);
  CHECK_ERR(dit_launch_env_read(&e), INVALID_ARGUMENT, "SLURM_PROCID='8' (Slurm) is not below SLURM_NTASKS='8'");
  setenv("SLURM_PROCID", "1", 1);
  unsetenv("SLURM_LOCALID");
  CHECK_ERR(dit_launch_env_read(&e), INVALID_ARGUMENT, "SLURM_LOCALID is not set");
}

static void test_openmpi(void) {
  dit_launch_env_t e;
  clear_env();
  setenv("OMPI_COMM_WORLD_RANK", "2", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
  CHECK_ERR(dit_launch_env_read(&e), INVALID_ARGUMENT, "DIT_MASTER_ADDR is not set");
  setenv("DIT_MASTER_ADDR", "10.0.0.1", 1);
  CHECK_OK(dit_launch_env_read(&e));
  CHECK_EQ_INT(e.launcher, DIT_LAUNCHER_OPENMPI);
  CHECK_EQ_INT(e.rank, 2);
  CHECK_EQ_INT(e.world, 4);
  CHECK_EQ_INT(e.local_rank, 0);
  CHECK_EQ_INT(e.local_world, 2);
  CHECK(!strcmp(e.addr, "10.0.0.1"));
  setenv("OMPI_COMM_WORLD_RANK", "x", 1);
  CHECK_ERR(dit_launch_env_read(&e), INVALID_ARGUMENT, "OMPI_COMM_WORLD_RANK='x' (Open MPI)");
}

/* The innermost launcher describes this process: torchrun over Open MPI over Slurm. */
static void test_precedence(void) {
  dit_launch_env_t e;
  torchrun("1", "2", "1");
  setenv("SLURM_PROCID", "0", 1);
  setenv("SLURM_NTASKS", "1", 1);
  setenv("SLURM_LOCALID", "0", 1);
  setenv("OMPI_COMM_WORLD_RANK", "0", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "1", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
  CHECK_OK(dit_launch_env_read(&e));
  CHECK_EQ_INT(e.launcher, DIT_LAUNCHER_TORCHRUN);
  CHECK_EQ_INT(e.rank, 1);
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  CHECK_OK(dit_launch_env_read(&e));
  CHECK_EQ_INT(e.launcher, DIT_LAUNCHER_OPENMPI);
  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("OMPI_COMM_WORLD_SIZE");
  CHECK_OK(dit_launch_env_read(&e));
  CHECK_EQ_INT(e.launcher, DIT_LAUNCHER_SLURM);
  /* Half a launcher is an error, not a fall-through to the next one. */
  setenv("WORLD_SIZE", "2", 1);
  CHECK_ERR(dit_launch_env_read(&e), INVALID_ARGUMENT, "RANK is not set");
  clear_env();
}

static void test_topology(void) {
  dit_manifest_t m;
  memset(&m, 0, sizeof m);
  dit_manifest_rank_t ranks[4];
  memset(ranks, 0, sizeof ranks);
  for (int i = 0; i < 4; i++) ranks[i].rank = i;
  m.topology.world = 4, m.topology.tp = 2, m.topology.cp = 2, m.topology.cfg = 1;
  strcpy(m.topology.cp_mode, "ulysses");
  m.ranks = ranks;
  m.n_ranks = 4;

  dit_launch_env_t e;
  torchrun("1", "2", "1");
  CHECK_OK(dit_launch_env_read(&e));
  CHECK_ERR(dit_launch_check_topology(&m, &e), FAILED_PRECONDITION,
            "manifest.json: field 'topology.world': the bundle needs 4 ranks, this launch has 2 (WORLD_SIZE from torchrun)");
  clear_env();
  CHECK_OK(dit_launch_env_read(&e));
  CHECK_ERR(dit_launch_check_topology(&m, &e), FAILED_PRECONDITION, "this launch has 1 (no launcher: a single process)");
  clear_env();
  setenv("SLURM_PROCID", "3", 1);
  setenv("SLURM_NTASKS", "4", 1);
  setenv("SLURM_LOCALID", "3", 1);
  setenv("DIT_MASTER_ADDR", "n0", 1);
  CHECK_OK(dit_launch_env_read(&e));
  CHECK_OK(dit_launch_check_topology(&m, &e));
  m.n_ranks = 3; /* rank 3 has no plan */
  CHECK_ERR(dit_launch_check_topology(&m, &e), FAILED_PRECONDITION, "field 'ranks': no plan for rank 3 of 4");
  m.n_ranks = 4;
  e.rank = 7;
  CHECK_ERR(dit_launch_check_topology(&m, &e), INVALID_ARGUMENT, "rank 7");
  clear_env();
}

static const char *write_file(const char *name, const void *bytes, size_t n, mode_t mode) {
  static char path[512];
  const char *dir = getenv("DIT_TEST_TMP");
  snprintf(path, sizeof path, "%s/%s.%d", dir ? dir : "/tmp", name, (int)getpid());
  if (dir) mkdir(dir, 0755);
  unlink(path);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  CHECK(fd >= 0);
  if (fd < 0) return path;
  CHECK_EQ_INT(write(fd, bytes, n), (long long)n);
  close(fd);
  chmod(path, mode); /* after creating: the umask must not decide what is tested */
  return path;
}

static void test_secret(void) {
  dit_launch_env_t e;
  torchrun("1", "2", "1");
  CHECK_OK(dit_launch_env_read(&e));
  CHECK_EQ_INT(e.secret_len, strlen(SECRET));
  CHECK(!memcmp(e.secret, SECRET, strlen(SECRET)));
  CHECK(!strcmp(e.secret_var, "DIT_JOB_SECRET"));
  CHECK_EQ_INT(e.rdzv_listen_fd, -1);

  /* A multi-rank launch without one is refused at start, saying what to set. */
  unsetenv("DIT_JOB_SECRET");
  CHECK_ERR(dit_launch_env_read(&e), INVALID_ARGUMENT,
            "torchrun launch of 2 ranks without a job secret: set DIT_JOB_SECRET (a value) or DIT_JOB_SECRET_FILE");
  clear_env();
  unsetenv("DIT_JOB_SECRET");
  setenv("SLURM_PROCID", "0", 1), setenv("SLURM_NTASKS", "3", 1), setenv("SLURM_LOCALID", "0", 1);
  setenv("DIT_MASTER_ADDR", "n0", 1);
  CHECK_ERR(dit_launch_env_read(&e), INVALID_ARGUMENT, "Slurm launch of 3 ranks without a job secret");
  /* One rank alone has nobody to prove anything to. */
  torchrun("0", "1", "0");
  unsetenv("DIT_JOB_SECRET");
  CHECK_OK(dit_launch_env_read(&e));
  CHECK_EQ_INT(e.secret_len, 0);

  torchrun("1", "2", "1");
  setenv("DIT_JOB_SECRET", "short", 1);
  CHECK_ERR(dit_launch_env_read(&e), INVALID_ARGUMENT, "DIT_JOB_SECRET holds a job secret of 5 bytes, at least 16");
  setenv("DIT_JOB_SECRET", "", 1);
  CHECK_ERR(dit_launch_env_read(&e), INVALID_ARGUMENT, "of 0 bytes");

  /* From a file: its bytes verbatim, the trailing newline included. */
  const char *p = write_file("secret", "file secret 0123456789\n", 23, 0600);
  torchrun("1", "2", "1");
  setenv("DIT_JOB_SECRET_FILE", p, 1);
  CHECK_ERR(dit_launch_env_read(&e), INVALID_ARGUMENT, "both DIT_JOB_SECRET and DIT_JOB_SECRET_FILE are set");
  unsetenv("DIT_JOB_SECRET");
  CHECK_OK(dit_launch_env_read(&e));
  CHECK_EQ_INT(e.secret_len, 23);
  CHECK(!memcmp(e.secret, "file secret 0123456789\n", 23));
  CHECK(!strcmp(e.secret_var, "DIT_JOB_SECRET_FILE"));
  /* Readable or writable by group or others: refused, as ssh refuses such a key. */
  static const mode_t open_modes[] = {0640, 0604, 0620, 0660, 0644, 0606};
  for (size_t i = 0; i < sizeof open_modes / sizeof open_modes[0]; i++) {
    chmod(p, open_modes[i]);
    char want[64];
    snprintf(want, sizeof want, "permissions %04o are too open", (unsigned)open_modes[i]);
    CHECK_ERR(dit_launch_env_read(&e), FAILED_PRECONDITION, want);
  }
  chmod(p, 0644);
  CHECK_ERR(dit_launch_env_read(&e), FAILED_PRECONDITION, "readable by its owner only (chmod 600");
  chmod(p, 0400);
  CHECK_OK(dit_launch_env_read(&e));
  unlink(p);
  CHECK_ERR(dit_launch_env_read(&e), NOT_FOUND, "DIT_JOB_SECRET_FILE=");
  setenv("DIT_JOB_SECRET_FILE", "/", 1);
  CHECK_ERR(dit_launch_env_read(&e), INVALID_ARGUMENT, "is not a regular file");
  /* A long secret is kept as its SHA-256 (HMAC's own rule for keys over a block). */
  static unsigned char big[1000];
  for (size_t i = 0; i < sizeof big; i++) big[i] = (unsigned char)(i * 7);
  p = write_file("bigsecret", big, sizeof big, 0600);
  setenv("DIT_JOB_SECRET_FILE", p, 1);
  CHECK_OK(dit_launch_env_read(&e));
  CHECK_EQ_INT(e.secret_len, 32);
  unlink(p);
  p = write_file("hugesecret", big, 0, 0600);
  CHECK_EQ_INT(truncate(p, 100000), 0);
  setenv("DIT_JOB_SECRET_FILE", p, 1);
  CHECK_ERR(dit_launch_env_read(&e), OUT_OF_RANGE, "has 100000 bytes");
  unlink(p);

  /* The listener `ditrun launch` hands rank 0; other ranks ignore it. */
  torchrun("0", "2", "0");
  setenv("DIT_RDZV_LISTEN_FD", "7", 1);
  CHECK_OK(dit_launch_env_read(&e));
  CHECK_EQ_INT(e.rdzv_listen_fd, 7);
  setenv("DIT_RDZV_LISTEN_FD", "2", 1);
  CHECK_ERR(dit_launch_env_read(&e), INVALID_ARGUMENT, "DIT_RDZV_LISTEN_FD='2': expected a descriptor above 2");
  torchrun("1", "2", "1");
  setenv("DIT_RDZV_LISTEN_FD", "7", 1);
  CHECK_OK(dit_launch_env_read(&e));
  CHECK_EQ_INT(e.rdzv_listen_fd, -1);
}

static void test_device(void) {
  dit_launch_env_t e;
  torchrun("3", "4", "1");
  CHECK_OK(dit_launch_env_read(&e));
  int dev = -1;
  CHECK_OK(dit_launch_pick_device(&e, 2, NULL, &dev));
  CHECK_EQ_INT(dev, 1);
  CHECK_OK(dit_launch_pick_device(&e, 2, "4,5", &dev));
  CHECK_EQ_INT(dev, 1);
  /* One visible GPU per process: the launcher bound it. */
  CHECK_OK(dit_launch_pick_device(&e, 1, "5", &dev));
  CHECK_EQ_INT(dev, 0);
  CHECK_ERR(dit_launch_pick_device(&e, 1, NULL, &dev), FAILED_PRECONDITION,
            "LOCAL_RANK=1 (torchrun) but this host has 1 visible GPU");
  CHECK_ERR(dit_launch_pick_device(&e, 0, "", &dev), FAILED_PRECONDITION, "no visible GPU");
  clear_env();
}

int main(void) {
  test_none();
  test_torchrun();
  test_torchrun_errors();
  test_slurm();
  test_openmpi();
  test_precedence();
  test_topology();
  test_device();
  test_secret();
  return check_summary("test_launch_env");
}
