/* The scratch store of the fuzz targets that write into one: its root under TMPDIR (one per
 * process) and the files left below it, to check that a refused input leaves nothing. */
#ifndef DIT_FUZZ_SCRATCH_H
#define DIT_FUZZ_SCRATCH_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* root = $TMPDIR/<name>.<pid>, or under /tmp. */
static void fuzz_scratch_root(char *root, size_t cap, const char *name) {
  const char *t = getenv("TMPDIR");
  snprintf(root, cap, "%s/%s.%d", t && t[0] ? t : "/tmp", name, (int)getpid());
}

/* Files under root/sub, and under its subdirectories depth levels down (cas/xx/: 1). */
static int fuzz_scratch_count(const char *root, const char *sub, int depth) {
  char p[512];
  if (snprintf(p, sizeof p, "%s/%s", root, sub) >= (int)sizeof p) return 0;
  DIR *d = opendir(p);
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char s[512];
    if (snprintf(s, sizeof s, "%s/%s", sub, e->d_name) >= (int)sizeof s) continue;
    n += depth ? fuzz_scratch_count(root, s, depth - 1) : 1;
  }
  closedir(d);
  return n;
}

#endif
