# shellcheck shell=bash
# What to put in LD_PRELOAD for a library at any path. Sourced by
# r2sock-run, r2sock-check and the tests (tests/preload.sh); installed next
# to r2sock-check. Not a program.
#
# The dynamic loader splits LD_PRELOAD at blanks and colons, and has no
# way to quote them: a library under "/tmp/r2 sock/build" is seen as two
# objects, neither of which exists, and the program runs without the shim
# (ld.so prints "cannot be preloaded: ignored"). Such a path is preloaded
# through a symbolic link whose own path has neither, in a directory of
# the calling user's that nobody else can write, so that no other user can
# point the link at a library of theirs:
#   ${TMPDIR:-/tmp}/r2sock-preload-UID/libr2sock-HASH.so
# (/tmp when TMPDIR itself has a blank or a colon). HASH is of the
# library's path, so each path has one link, made once and reused by every
# later process: a link left behind names a library the user chose, and
# costs nothing. The directory is world-searchable: a program that drops
# its privileges (a server started as root that becomes nobody) must still
# reach the library through it after an exec.
#
# r2s_preload_path LIB
#   prints the path to put in LD_PRELOAD for LIB (an absolute path): LIB
#   itself when the loader can take it, else the link. Returns 1, with the
#   reason on stderr, when no safe link can be made.

r2s_preload_path() {
  local lib=$1 dir hash link tmp
  case $lib in
    *[[:space:]:]*) ;;
    *) printf '%s\n' "$lib"; return 0 ;;
  esac
  dir=${TMPDIR:-/tmp}
  case $dir in *[[:space:]:]* | '') dir=/tmp ;; esac
  dir=$dir/r2sock-preload-$(id -u)
  if [ ! -d "$dir" ] && ! mkdir -m 0755 "$dir" 2>/dev/null && [ ! -d "$dir" ]; then
    echo "cannot make $dir for a link to $lib (its path has a blank or a colon, which LD_PRELOAD cannot hold)" >&2
    return 1
  fi
  # Ours, a real directory, and writable by nobody else: otherwise another
  # user could swap the link for a library of their own.
  if [ -L "$dir" ] || [ "$(stat -c '%u' "$dir")" != "$(id -u)" ] || [ -n "$(find "$dir" -maxdepth 0 -perm /022)" ]; then
    echo "$dir is not a directory of user $(id -u) that only it can write: not linking $lib from there" >&2
    return 1
  fi
  hash=$(printf '%s' "$lib" | sha256sum | cut -c1-16)
  link=$dir/libr2sock-$hash.so
  if [ "$(readlink "$link" 2>/dev/null)" != "$lib" ]; then
    # A new name, then a rename over the old: a process starting meanwhile
    # sees the old link or the new one, never none.
    tmp=$link.$$.$RANDOM
    if ! { ln -s "$lib" "$tmp" && mv -fT "$tmp" "$link"; }; then
      rm -f "$tmp"
      echo "cannot link $link to $lib" >&2
      return 1
    fi
  fi
  printf '%s\n' "$link"
}
