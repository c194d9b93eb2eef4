/* The entries of an epoll set's registry and their index by fd and by
 * data (epoll_index.h). */
#include "epoll_index.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

enum { BY_FD, BY_DATA };

/* The fewest entries r->v has room for once it has any: a set of a few
 * connections never reallocates. */
#define MIN_CAP 16u

unsigned r2s__ep_bucket(uint64_t key, unsigned bits)
{
  /* Fibonacci hashing: the product's top bits depend on every bit of the
   * key, which spreads both the consecutive small numbers of fds and the
   * aligned pointers many applications give as data. */
  return (unsigned)((key * 0x9e3779b97f4a7c15ull) >> (64 - bits));
}

static uint64_t key_of(const r2s_ep_entry_t *e, int t)
{
  return t == BY_FD ? (uint64_t)(uint32_t)e->fd : e->data;
}

/* The head of key's chain in table t; chains hold positions + 1 (0: the
 * end). */
static unsigned *head(r2s_ep_reg_t *r, int t, uint64_t key)
{
  return &r->heads[((size_t)t << r->bits) + r2s__ep_bucket(key, r->bits)];
}

static void link_in(r2s_ep_reg_t *r, unsigned i, int t)
{
  unsigned *h = head(r, t, key_of(&r->v[i], t));
  r->v[i].next[t] = *h;
  *h = i + 1;
}

/* The link that holds position i in its chain of table t: the head, or
 * the next of the entry in front of it. Chains are singly linked, so this
 * walks one: a bucket's few keys, or the entries that share a data, which
 * r2s__ep_find_data walks whole anyway. */
static unsigned *link_to(r2s_ep_reg_t *r, unsigned i, int t)
{
  unsigned *l = head(r, t, key_of(&r->v[i], t));
  while (*l != i + 1) l = &r->v[*l - 1].next[t];
  return l;
}

static void link_out(r2s_ep_reg_t *r, unsigned i, int t)
{
  *link_to(r, i, t) = r->v[i].next[t];
}

void r2s__ep_reindex(r2s_ep_reg_t *r)
{
  if (!r->heads) return;
  memset(r->heads, 0, ((size_t)2 << r->bits) * sizeof *r->heads);
  for (unsigned i = 0; i < r->n; i++) {
    link_in(r, i, BY_FD);
    link_in(r, i, BY_DATA);
  }
}

/* Room for cap entries (a power of two, at least n) and an index of as
 * many buckets, as far as memory allows; false if r->v needed more room
 * and could not have it. A smaller r->v or index that cannot be had
 * leaves the bigger one. */
static bool resize(r2s_ep_reg_t *r, unsigned cap)
{
  r2s_ep_entry_t *v = realloc(r->v, (size_t)cap * sizeof *v);
  if (!v && cap > r->cap) return false;
  if (v) r->v = v, r->cap = cap;
  unsigned bits = (unsigned)__builtin_ctz(r->cap);
  if (r->heads && bits == r->bits) return true;
  unsigned *heads = calloc((size_t)2 << bits, sizeof *heads);
  if (!heads) return true; /* the old index, or the walk of r->v */
  unsigned *old = r->heads;
  r->heads = heads, r->bits = bits;
  r2s__ep_reindex(r);
  free(old);
  return true;
}

/* With no index: the first entry with key in table t. */
static r2s_ep_entry_t *walk(r2s_ep_reg_t *r, int t, uint64_t key)
{
  for (unsigned i = 0; i < r->n; i++)
    if (key_of(&r->v[i], t) == key) return &r->v[i];
  return NULL;
}

r2s_ep_entry_t *r2s__ep_find_fd(r2s_ep_reg_t *r, int fd)
{
  if (!r->heads) return walk(r, BY_FD, (uint32_t)fd);
  for (unsigned p = *head(r, BY_FD, (uint32_t)fd); p; p = r->v[p - 1].next[BY_FD])
    if (r->v[p - 1].fd == fd) return &r->v[p - 1];
  return NULL;
}

r2s_ep_entry_t *r2s__ep_find_data(r2s_ep_reg_t *r, uint64_t data)
{
  if (!r->heads) return walk(r, BY_DATA, data);
  /* Entries sharing a data share a chain: the whole chain is walked for
   * the lowest position, which keeps the answer the walk of r->v gives. */
  unsigned best = 0;
  for (unsigned p = *head(r, BY_DATA, data); p; p = r->v[p - 1].next[BY_DATA])
    if (r->v[p - 1].data == data && (!best || p < best)) best = p;
  return best ? &r->v[best - 1] : NULL;
}

r2s_ep_entry_t *r2s__ep_add(r2s_ep_reg_t *r, const r2s_ep_entry_t *e)
{
  if (r->n == r->cap && !resize(r, r->cap ? r->cap * 2 : MIN_CAP)) return NULL;
  unsigned i = r->n++;
  r->v[i] = *e;
  if (r->heads) {
    link_in(r, i, BY_FD);
    link_in(r, i, BY_DATA);
  }
  return &r->v[i];
}

void r2s__ep_set(r2s_ep_reg_t *r, r2s_ep_entry_t *at, const r2s_ep_entry_t *e)
{
  unsigned i = (unsigned)(at - r->v);
  assert(e->fd == at->fd);
  if (r->heads) link_out(r, i, BY_DATA);
  unsigned next = at->next[BY_FD];
  *at = *e;
  at->next[BY_FD] = next; /* same fd: its place in that chain stays */
  if (r->heads) link_in(r, i, BY_DATA);
}

void r2s__ep_remove(r2s_ep_reg_t *r, r2s_ep_entry_t *at)
{
  unsigned i = (unsigned)(at - r->v), last = r->n - 1;
  if (r->heads) {
    link_out(r, i, BY_FD);
    link_out(r, i, BY_DATA);
  }
  if (i != last) {
    if (r->heads) {
      *link_to(r, last, BY_FD) = i + 1;
      *link_to(r, last, BY_DATA) = i + 1;
    }
    r->v[i] = r->v[last];
  }
  r->n = last;
  /* A quarter full: half the room, so that a set that held many
   * connections gives the memory back, and no add or remove at the
   * boundary resizes every time. */
  if (r->cap > MIN_CAP && r->n <= r->cap / 4) (void)resize(r, r->cap / 2);
}

void r2s__ep_clear(r2s_ep_reg_t *r)
{
  free(r->v);
  free(r->heads);
  free(r->act);
  r->v = NULL;
  r->heads = NULL;
  r->act = NULL;
  r->n = r->cap = r->bits = 0;
  r->nact = r->act_cap = 0;
  r->act_valid = r->carried = false;
}

bool r2s__ep_act_add(r2s_ep_reg_t *r, r2s_ep_entry_t *e)
{
  if (e->active) return true;
  if (r->nact == r->act_cap) {
    unsigned cap = r->act_cap ? r->act_cap * 2 : 16;
    int *v = realloc(r->act, (size_t)cap * sizeof *v);
    if (!v) {
      r->act_valid = false;
      return false;
    }
    r->act = v, r->act_cap = cap;
  }
  r->act[r->nact++] = e->fd;
  e->active = true;
  return true;
}
