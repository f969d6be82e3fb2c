/* POSIX file helpers used by the bundle writer, the reader and the CLIs. */
#include "base/fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

dit_status_t dit_file_read(const char *path, size_t max_bytes, char **out_data,
                           size_t *out_size) {
  *out_data = NULL;
  *out_size = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return dit_status_make(errno == ENOENT ? DIT_CODE_NOT_FOUND : DIT_CODE_IO,
                           "%s: cannot open: %s", path, strerror(errno));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return DIT_ERR(IO, "%s: cannot stat: %s", path, strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return DIT_ERR(INVALID_ARGUMENT, "%s: not a regular file", path);
  }
  if ((uint64_t)st.st_size > max_bytes) {
    close(fd);
    return DIT_ERR(OUT_OF_RANGE, "%s: %lld bytes, more than the %zu allowed", path,
                   (long long)st.st_size, max_bytes);
  }
  size_t n = (size_t)st.st_size;
  char *buf = malloc(n + 1);
  if (!buf) {
    close(fd);
    return DIT_ERR(RESOURCE_EXHAUSTED, "%s: cannot allocate %zu bytes", path, n + 1);
  }
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      int e = errno;
      free(buf);
      close(fd);
      return r == 0 ? DIT_ERR(DATA_LOSS, "%s: file shrank while reading (%zu of %zu bytes)",
                              path, got, n)
                    : DIT_ERR(IO, "%s: read failed: %s", path, strerror(e));
    }
    got += (size_t)r;
  }
  close(fd);
  buf[n] = 0;
  *out_data = buf;
  *out_size = n;
  return DIT_OK;
}

dit_status_t dit_file_map(const char *path, dit_mapping_t *out) {
  out->data = NULL;
  out->size = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return dit_status_make(errno == ENOENT ? DIT_CODE_NOT_FOUND : DIT_CODE_IO,
                           "%s: cannot open: %s", path, strerror(errno));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return DIT_ERR(INVALID_ARGUMENT, "%s: not a readable regular file", path);
  }
  if (st.st_size == 0) {
    close(fd);
    return DIT_OK;
  }
  void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  int e = errno;
  close(fd);
  if (p == MAP_FAILED) return DIT_ERR(IO, "%s: mmap failed: %s", path, strerror(e));
  out->data = p;
  out->size = (size_t)st.st_size;
  return DIT_OK;
}

void dit_file_unmap(dit_mapping_t *m) {
  if (m->data) munmap((void *)m->data, m->size);
  m->data = NULL;
  m->size = 0;
}

/* The parts, one after the other, then fsync. */
static dit_status_t write_all(int fd, const char *path, const void *const *parts, const size_t *sizes, int n) {
  for (int k = 0; k < n; k++) {
    const char *p = parts[k];
    size_t size = sizes[k];
    while (size) {
      ssize_t w = write(fd, p, size);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return DIT_ERR(IO, "%s: write failed: %s", path, strerror(errno));
      p += w;
      size -= (size_t)w;
    }
  }
  if (fsync(fd) != 0) return DIT_ERR(IO, "%s: fsync failed: %s", path, strerror(errno));
  return DIT_OK;
}

dit_status_t dit_file_write_new(const char *path, const void *data, size_t size) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    return dit_status_make(errno == EEXIST ? DIT_CODE_ALREADY_EXISTS : DIT_CODE_IO,
                           "%s: cannot create: %s", path, strerror(errno));
  }
  dit_status_t s = write_all(fd, path, &data, &size, 1);
  close(fd);
  if (s) unlink(path);
  return s;
}

dit_status_t dit_file_write_atomic(const char *path, const void *data, size_t size) {
  return dit_file_write_atomic_parts(path, &data, &size, 1);
}

dit_status_t dit_file_write_atomic_parts(const char *path, const void *const *parts, const size_t *sizes, int n_parts) {
  size_t n = strlen(path) + 16;
  char *tmp = malloc(n);
  if (!tmp) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", path);
  snprintf(tmp, n, "%s.tmpXXXXXX", path);
  int fd = mkstemp(tmp);
  if (fd < 0) {
    dit_status_t s = DIT_ERR(IO, "%s: cannot create a temporary file: %s", path, strerror(errno));
    free(tmp);
    return s;
  }
  dit_status_t s = write_all(fd, tmp, parts, sizes, n_parts);
  if (!s && fchmod(fd, 0644) != 0) s = DIT_ERR(IO, "%s: chmod: %s", tmp, strerror(errno));
  close(fd);
  if (!s && rename(tmp, path) != 0)
    s = DIT_ERR(IO, "%s: rename from %s failed: %s", path, tmp, strerror(errno));
  if (s) unlink(tmp);
  free(tmp);
  return s;
}

dit_status_t dit_mkdirs(const char *path, int mode) {
  size_t n = strlen(path);
  char *buf = malloc(n + 1);
  if (!buf) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", path);
  memcpy(buf, path, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (buf[i] == '/' || buf[i] == 0) {
      char c = buf[i];
      buf[i] = 0;
      if (mkdir(buf, (mode_t)mode) != 0 && errno != EEXIST) {
        dit_status_t s = DIT_ERR(IO, "%s: cannot create directory: %s", buf, strerror(errno));
        free(buf);
        return s;
      }
      buf[i] = c;
    }
  }
  free(buf);
  if (!dit_is_dir(path)) return DIT_ERR(IO, "%s: exists and is not a directory", path);
  return DIT_OK;
}

dit_status_t dit_remove_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) return errno == ENOENT ? DIT_OK : DIT_ERR(IO, "%s: %s", path, strerror(errno));
  if (!S_ISDIR(st.st_mode)) {
    if (unlink(path) != 0) return DIT_ERR(IO, "%s: cannot remove: %s", path, strerror(errno));
    return DIT_OK;
  }
  DIR *d = opendir(path);
  if (!d) return DIT_ERR(IO, "%s: cannot open directory: %s", path, strerror(errno));
  struct dirent *e;
  dit_status_t s = DIT_OK;
  while (!s && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    size_t n = strlen(path) + strlen(e->d_name) + 2;
    char *child = malloc(n);
    if (!child) {
      s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
      break;
    }
    snprintf(child, n, "%s/%s", path, e->d_name);
    s = dit_remove_tree(child);
    free(child);
  }
  closedir(d);
  if (!s && rmdir(path) != 0) s = DIT_ERR(IO, "%s: cannot remove: %s", path, strerror(errno));
  return s;
}

dit_status_t dit_fsync_dir(const char *path) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return DIT_ERR(IO, "%s: cannot open directory: %s", path, strerror(errno));
  int r = fsync(fd);
  int e = errno;
  close(fd);
  if (r != 0 && e != EINVAL) return DIT_ERR(IO, "%s: fsync failed: %s", path, strerror(e));
  return DIT_OK;
}

int dit_path_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

int dit_is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

dit_status_t dit_path_join(char *out, size_t cap, const char *a, const char *b) {
  int n = snprintf(out, cap, "%s/%s", a, b);
  if (n < 0 || (size_t)n >= cap)
    return DIT_ERR(OUT_OF_RANGE, "path too long: %s/%s (limit %zu bytes)", a, b, cap - 1);
  return DIT_OK;
}
