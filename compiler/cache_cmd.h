/* ditc's store commands: cache (ls, verify, rm, gc, why, push, pull, add), keygen, pack. */
#ifndef DIT_COMPILER_CACHE_CMD_H
#define DIT_COMPILER_CACHE_CMD_H

#include "compiler/compile.h"

#define DIT_CACHE_USAGE                                                                              \
  "  cache ls | verify | rm IDENTITY | gc [--max-size SIZE] [--max-age AGE]   [--store DIR]\n"    \
  "      List, rehash (a damaged blob is removed), remove an entry, or collect: entries unused\n"  \
  "      for longer than AGE (30s, 15m, 12h, 7d), then least recently used ones until the\n"     \
  "      blobs take at most SIZE (500M, 20G, 1T), then every blob no entry lists.\n"             \
  "      The store is --store DIR or $DITC_STORE.\n"                                              \
  "  cache why MODEL_DIR <compile options>\n"                                                     \
  "      Say whether that compile would hit the store, and if not, which identity inputs\n"      \
  "      differ from the nearest entries (as compile --explain).\n"                              \
  "  cache add BUNDLE_DIR\n"                                                                      \
  "      Enter a bundle directory into the store.\n"                                              \
  "  cache push IDENTITY [--sign-key KEY] | cache pull IDENTITY [--trusted-key PUB]\n"           \
  "      [--max-bytes SIZE] [--max-blobs N]\n"                                                   \
  "      [--remote URL] [--token-file FILE] [--insecure-token] [--timeout S] [--retries N]\n"    \
  "      Copy an entry to or from a remote HTTP store (--remote or $DITC_REMOTE; bearer token\n" \
  "      from --token-file or $DITC_REMOTE_TOKEN): only the blobs the other side lacks, zstd\n"  \
  "      in transit, every pulled blob checked against its XXH3-128 and SHA-256. --sign-key\n"   \
  "      signs the manifest (ed25519) first; --trusted-key refuses entries not signed by it.\n"  \
  "      A pull stops, leaving nothing, past --max-bytes of blobs (counted as they are\n"       \
  "      decompressed, not taken from the manifest; K/M/G/T suffixes; default 256G) or a\n"    \
  "      manifest of more than --max-blobs blobs (default 65536). The token is sent over\n"    \
  "      plain http:// only to loopback (127.0.0.0/8, ::1, localhost) unless --insecure-token.\n" \
  "  keygen -o KEY\n"                                                                             \
  "      Write an ed25519 key pair: KEY (private, mode 0600) and KEY.pub (public).\n"            \
  "  pack IDENTITY -o FILE.ditb [--store DIR]\n"                                                  \
  "      Write a store entry as one archive file that ditrun runs directly.\n"

/* Each returns the process exit status. */
int dit_cache_main(int argc, char **argv);
int dit_keygen_main(int argc, char **argv);
int dit_pack_main(int argc, char **argv);
/* `cache why`: the compile options already parsed. */
int dit_cache_why(const dit_compile_options_t *o);

#endif
