/* Helpers for the tests that run one forked process per rank on loopback (rendezvous, TCP
 * collectives): a free port, the launch environment torchrun would give, a plain connection,
 * the count of sockets that would leak into an exec'd child, and rank 0's log. */
#ifndef DIT_TESTS_LAUNCH_HELPERS_H
#define DIT_TESTS_LAUNCH_HELPERS_H

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/launch/launch_env.h"

/* A loopback port nobody listens on right now. */
static int launch_free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = -1;
  if (!bind(fd, (struct sockaddr *)&a, sizeof a) && !getsockname(fd, (struct sockaddr *)&a, &len)) port = ntohs(a.sin_port);
  close(fd);
  return port;
}

/* Sockets of this process that would leak into a child it execs. */
static int launch_inheritable_sockets(void) {
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  for (struct dirent *de; d && (de = readdir(d));) {
    int fd = atoi(de->d_name);
    struct stat st;
    if (de->d_name[0] == '.' || fd == dirfd(d) || fstat(fd, &st) || !S_ISSOCK(st.st_mode)) continue;
    n += !(fcntl(fd, F_GETFD) & FD_CLOEXEC);
  }
  if (d) closedir(d);
  return n;
}

/* What torchrun's variables would give rank of world, meeting at 127.0.0.1:port. */
static void launch_env_fill(dit_launch_env_t *e, int rank, int world, int port, const char *secret) {
  memset(e, 0, sizeof *e);
  e->launcher = DIT_LAUNCHER_TORCHRUN;
  e->rank = rank, e->local_rank = rank, e->world = world;
  e->local_world = -1;
  e->rank_var = "RANK", e->world_var = "WORLD_SIZE", e->local_rank_var = "LOCAL_RANK", e->addr_var = "MASTER_ADDR", e->port_var = "";
  strcpy(e->addr, "127.0.0.1");
  e->port = port;
  e->secret_len = strlen(secret);
  memcpy(e->secret, secret, e->secret_len);
  e->secret_var = "DIT_JOB_SECRET";
  e->rdzv_listen_fd = -1;
}

/* One connection attempt to 127.0.0.1:port; -1 if refused. */
static int launch_connect(int port) {
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons((uint16_t)port);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a)) close(fd), fd = -1;
  return fd;
}

/* Where rank 0's stderr goes: under DIT_TEST_TMP (made if missing), else /tmp. */
static void launch_log_path(char *buf, size_t cap, const char *name) {
  const char *dir = getenv("DIT_TEST_TMP");
  if (dir) mkdir(dir, 0755);
  snprintf(buf, cap, "%s/%s.%d.log", dir ? dir : "/tmp", name, (int)getpid());
}

/* Lines of the file that hold needle, and also `and` when it is not NULL. */
static int launch_count_lines(const char *path, const char *needle, const char *and) {
  FILE *f = fopen(path, "r");
  char line[1024];
  int n = 0;
  while (f && fgets(line, sizeof line, f)) n += strstr(line, needle) && (!and || strstr(line, and));
  if (f) fclose(f);
  return n;
}

#endif
