// SPDX-License-Identifier: MIT
/*
 * backends/ram.c - a sparse RAM disk, like the kernel's brd or nbdkit's
 * sparse allocator: any geometry the config gives, memory only for the 4 KiB
 * pages that were written, zeros for the rest. A 16 TiB device opens at once
 * on a small machine; resident memory follows data written, not device size.
 * It keeps instant copy-on-write snapshots (struct blk_snap_ops), saves the
 * device or a snapshot to a sparse image file, and starts from one
 * (`image = FILE`).
 *
 * Structure:
 *  - A radix tree of 512-slot nodes maps a page index to its page; the
 *    number of levels follows from the device size; an empty tree is a NULL
 *    root. Readers walk with acquire loads and never lock a node or page.
 *    Nodes and pages are added lock-free: allocate, fill, compare-and-swap
 *    into the empty slot, and give back the loser (brd_insert_page).
 *  - Nodes and pages are both 4 KiB pages of 2 MiB slabs (mmap, 2 MiB
 *    aligned, header in page 0). First touch of fresh memory costs ~0.35
 *    GB/s here against ~21 GB/s for reused memory (measured on this kind of
 *    machine), so freed pages are reused before a fresh page is carved, and
 *    slabs are asked to be transparent huge pages (one fault per 2 MiB;
 *    measured at ram_slab_map()).
 *  - A reserve of `reserve` bytes of slabs (default 8M), mapped and touched
 *    ahead by the device's arena thread, is where a write gets a new slab:
 *    the I/O path neither maps nor faults memory while the reserve lasts,
 *    and under memory pressure the arena thread, not a writer, waits for
 *    reclaim. It starts with the first write (a device never written holds
 *    nothing); a slab left empty by a discard or a reset goes back to it
 *    (already touched) before the rest go back to the system.
 *  - DISCARD and WRITE_ZEROES free whole pages (and nodes left empty) and
 *    zero partial ones. A slab whose pages are all free goes back to the
 *    system (unless the reserve keeps it), unmapped by the arena thread
 *    soon after: unmapping costs more than freeing the pages did.
 *
 * Snapshots share pages: every node and page has a reference count (in its
 * slab's header): how many slots and tree roots point at it. The device is
 * one tree (rd->root), each snapshot another (snap->root). Taking a snapshot
 * takes a reference on the device's root: nothing is copied, no data memory
 * is used. Reset drops the device's root and takes a reference on the
 * snapshot's; deleting a snapshot drops its root. Dropping the last
 * reference frees a node or page and drops what it points at, so the cost
 * of a reset or a delete is what only the dropped tree held (what was
 * written since), never what is shared: a reset of a 4 GiB device with
 * 1 GiB written since its snapshot took 7.5 ms of CPU (26 ms wall on a
 * loaded 2-CPU VM; tools/blkfs-ramsnap), a snapshot of 1 GiB of data 0.2
 * ms. Emptied slabs are unmapped afterwards by the arena thread. A
 * snapshot's own memory is what it alone references: the walk in
 * ram_own_bytes().
 *
 * Copy-on-write is path copying (as in reference-counted B-trees): a writer
 * walks down from the device's root, and a node or page whose count is
 * above 1 is shared with another tree, so the writer copies it (a node's
 * copy takes a reference on each child, which is then shared by the
 * original and the copy), publishes the copy by compare-and-swap into the
 * slot it came from, and drops one reference on the original. Below a node
 * the device holds alone, a child's count says again whether the child is
 * shared. So the first write to a shared page after a snapshot costs a
 * 4 KiB copy (and, for the first write in each 2 MiB, a copy of the leaf,
 * 4 KiB plus 512 count increments); every later write to the page writes
 * in place after reading two counts (a device with no snapshot skips even
 * those: invariant 5).
 *
 * Invariants (ar->lock held shared, as READ and WRITE hold it; the device's
 * "own region" is what its root reaches through counts that are all 1):
 *  1. Shared is immutable: a node or page whose count is above 1 is never
 *     written, by a writer or anyone else. Only the own region is written in
 *     place. A snapshot's tree is never written at all.
 *  2. A node or page of the own region shows count 1, exactly: a count
 *     rises only when a parent is copied, and only a shared parent is
 *     copied. A count above 1 seen through an own parent is true sharing.
 *     Counts seen are never below the truth: a copy takes its references
 *     before it is published and the winner drops the original's after,
 *     and the loser of a race to publish gives back only what it took.
 *  3. Nothing is freed under the shared lock. The winner of a copy drops
 *     the original from >= 2 to >= 1 (the other tree keeps it: asserted), so
 *     a reader or writer that loaded a pointer before the swap keeps
 *     reading memory that is valid and unchanged. Counts reach 0 only under
 *     ar->lock exclusive (DISCARD, WRITE_ZEROES, snapshot delete, reset, the
 *     end of a save), and only then is memory freed.
 *  4. A writer that sees count 1 re-reads the slot it came from: if the
 *     slot still holds it, it is the device's own for the rest of the I/O
 *     (nothing makes an own node shared under the shared lock); if not, it
 *     was just replaced by a copy, its count fell to 1 because it belongs to
 *     a snapshot now, and the writer retries from the slot. The winner
 *     swaps the slot (release) before it drops the count (release), and the
 *     writer loads the count with acquire: a 1 that comes from that drop
 *     makes the new slot value visible to the re-read.
 *  5. With no tree besides the device's in its arena (ar->nr_trees == 1:
 *     no snapshot, no save under way, no clone) every count is 1 by 2 and
 *     3, so WRITE skips the checks of 4: the path of a device without
 *     snapshots is the plain write path (one more load, of nr_trees, per
 *     I/O). nr_trees changes only under ar->lock exclusive, so it is
 *     stable during an I/O. It counts the trees of every device of the
 *     arena, not the device's own snapshots: an origin whose snapshot was
 *     deleted still shares nodes with the clone taken from it.
 *
 * Who reads what:
 *  - A page being copied is shared, so by 1 it is not changing: its readers
 *    (device readers that loaded it, the copying writer, snapshot readers)
 *    all read the same bytes. The copy is private to its writer until the
 *    compare-and-swap publishes it, filled whole (the old bytes around the
 *    new ones); a reader of the slot sees the old page whole or the new one
 *    whole, never a mix from a copy. (A write to an own page is in place, as
 *    without snapshots: a read racing it waits on the page's stripe, see
 *    ram_read_map(), and gets the page before or after it, whole.)
 *  - Snapshot calls change trees only under ar->lock exclusive, when no I/O
 *    is inside the backend; every I/O is before or after them, whole.
 *    Create and delete may come at any time; the daemon holds writes for a
 *    create so that the snapshot is the point its users wrote. A reset must
 *    come with no I/O in flight on the device at all (the daemon quiesces
 *    it, and drops the caches above afterwards, since they describe contents
 *    that are gone): ram_snap_reset() asserts that no I/O of the device is
 *    inside the lock (ram_io_inside(): the lock itself may be busy with a
 *    clone's I/O), so a reset racing I/O inside the backend aborts
 *    instead of tearing it.
 *  - A list walks the snapshots' trees under ar->lock shared (counts may
 *    move under it; nothing is freed). A save walks its tree with no lock
 *    on it: a snapshot's tree, or the save's own reference to the device's,
 *    is never written (1), and ctl_lock keeps it from being dropped.
 *
 * Resize (ram_resize()): with ctl_lock and ar->lock exclusive, under a
 * device the daemon quiesced. A grow that needs more levels puts every
 * tree's root (the device's and each snapshot's) into slot 0 of a new root,
 * so all trees keep the one height; a shrink (refused while snapshots
 * exist, which would bring the data back, or the arena holds other trees,
 * which may share the pages past the end) drops the pages past the end.
 * Snapshots have no size of their own: they read as the device's size.
 * Heights are per device: a clone starts at its origin's, and a node
 * shared by two trees sits at the same level in both, whatever their
 * roots' heights become.
 *
 * Clones (clone = DEV@SNAP): a device whose tree starts as a reference to
 * a snapshot's root of another device, DEV. Its nodes and pages are DEV's,
 * so the two devices share one arena (struct ram_arena): the slabs, the
 * allocator, the counts and ar->lock, under which every rule above holds
 * for all trees of all its devices at once. That is why the lock is the
 * arena's, not the device's: a count is touched without a locked
 * instruction only under ar->lock exclusive (ref_put_locked()), which
 * must keep out the writers of every device that may share the page. The
 * cost: a DISCARD, reset or snapshot call on one device holds up the I/O
 * of the others for as long as it runs (short: what it frees). The arena
 * lives until its last device closes (clone or origin first, either way):
 * a device that is not the last drops its own trees under ar->lock
 * exclusive, so that only what it alone held is freed; the last unmaps
 * the slabs. A process-wide registry (ram_registry) finds DEV by name.
 *
 * Lock order: ram_registry_lock (the open devices, by name: a clone's
 * open and a close) -> rd->ctl_lock (snapshot calls, one at a time; the
 * snapshot list; a clone's open takes its origin's) -> ar->lock (shared for READ/WRITE, which only add to the tree and
 * copy what is shared; exclusive for DISCARD/WRITE_ZEROES and snapshot
 * calls, which drop references and free) -> ar->alloc_lock (slabs, the
 * reserve); ar->lock -> the page stripes (ar->stripe: ram_read_map()).
 * The arena thread takes only alloc_lock. None is held when end_io runs,
 * but for a mapped READ's (BLK_IO_MAPPED): ar->lock shared and the
 * stripes of its pages, until that end_io, which replies from them, returns. ar->lock is a big-reader lock (backends/lib/brlock.h): its
 * writer holds its own mutex throughout, a reader that finds a writer
 * waits on that mutex with no claim held, and a thread holds at most one
 * arena's lock shared at a time (no I/O is submitted under it).
 *
 * Memory: the index costs one leaf (4 KiB) per 2 MiB of device space
 * written, 2 MiB per GiB of data (0.2%), and the slab headers as much
 * again. A snapshot costs nothing when taken; later, the first write into
 * each 2 MiB of shared space copies its leaf (and the few nodes above):
 * at most another 2 MiB of index per GiB the device overwrites, besides the
 * data pages copied.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "backends_int.h"
#include "kit/knobs.h"
#include "lib/brlock.h"
#include "lib/copy.h"

#define RAM_PAGE_SHIFT	12
#define RAM_PAGE_SIZE	(1u << RAM_PAGE_SHIFT)
#define RAM_PAGE_MASK	(RAM_PAGE_SIZE - 1)

#define RAM_NODE_SHIFT	9
#define RAM_NODE_SLOTS	(1u << RAM_NODE_SHIFT)
#define RAM_NODE_MASK	(RAM_NODE_SLOTS - 1)

#define RAM_SLAB_SHIFT	21
#define RAM_SLAB_SIZE	(1ul << RAM_SLAB_SHIFT)
#define RAM_SLAB_PAGES	(RAM_SLAB_SIZE >> RAM_PAGE_SHIFT)	/* page 0 is the header */

/*
 * How long the arena thread waits after a reserve slab failed to map
 * (memory short) before it tries again: long enough not to spin on a
 * failing mmap(2), short enough that the reserve fills again soon after
 * memory comes back. No I/O waits for it (a writer maps its own slab
 * meanwhile), and a release or a stop signals thread_cv and ends it early.
 */
#define RAM_MAP_RETRY_MS	100

/* DISCARD and WRITE_ZEROES hold rd->ar->lock exclusive for at most this much. */
#define RAM_ZERO_CHUNK	(1ull << 30)

/*
 * A mapped read (BLK_IO_MAPPED): at most this many segments, holes at most
 * RAM_ZERO_MAP bytes each (the zero page they point at); more: the read
 * copies. Stripes: the page locks between mapped reads and in-place writes.
 */
#define RAM_MAP_MAX	64
#define RAM_ZERO_MAP	(64u << 10)
#define RAM_STRIPES	1024

/* Pages a writer takes from the allocator per acquisition of alloc_lock. */
#define RAM_STASH	64

/* The reserve: default, and the most a config may ask for. */
#define RAM_RESERVE_DEF	(8ull << 20)
#define RAM_RESERVE_MAX	(1ull << 30)

/* Image files are read, and saved pages written, this much per call. */
#define RAM_IO_CHUNK	(1u << 20)

/*
 * An interior node's slots point to nodes, a leaf's to pages. A node is one
 * slab page. Slots of the device's own nodes go from NULL to a pointer, or
 * from a shared child to its copy, by compare-and-swap under rd->ar->lock
 * shared; they are cleared only under rd->ar->lock exclusive.
 */
struct ram_node {
	void *slot[RAM_NODE_SLOTS];
};

_Static_assert(sizeof(struct ram_node) == RAM_PAGE_SIZE, "a node is one page");

/* Lives in page 0 of its slab; every field under rd->ar->alloc_lock but ref[]. */
struct ram_slab {
	struct ram_slab *prev, *next;		/* rd->ar->partial: has freed pages; rd->ar->spare */
	struct ram_slab *all_prev, *all_next;	/* rd->ar->slabs: every slab */
	unsigned int nr_used;	/* pages handed out (in a tree or a stash) */
	unsigned int next_fresh; /* first page never handed out; 1..RAM_SLAB_PAGES */
	unsigned int nr_freed;	/* entries in freed[] */
	bool listed;		/* on rd->ar->partial */
	bool dirty;		/* pages never handed out may hold old data (reused slab) */
	uint16_t freed[RAM_SLAB_PAGES];	/* pages handed out once and given back */
	/* Per page: references to the node or data page (atomic; see the top). */
	uint32_t ref[RAM_SLAB_PAGES];
};

_Static_assert(sizeof(struct ram_slab) <= RAM_PAGE_SIZE, "slab header fits page 0");

/* A snapshot: a tree of its own, never written. */
struct ram_snap {
	struct ram_snap *next;		/* ctl_lock: rd->snaps, oldest first */
	struct ram_node *root;		/* a reference to its tree; NULL: empty */
	uint64_t created;		/* CLOCK_REALTIME seconds */
	/*
	 * ctl_lock: its data pages, counted by the first list (the tree never
	 * changes); UINT64_MAX: not yet. A list is what a reset checks the
	 * name with, and a walk of every leaf of a large snapshot cost more
	 * than the reset itself (crashcheck resets a clone per state).
	 */
	uint64_t data_pages;
	char name[BLK_SNAP_NAME_MAX + 1];
};

/*
 * The memory a device's trees live in, and the lock over them: one per
 * device opened from nothing or an image, shared by the devices cloned
 * from it (clone = DEV@SNAP) and by theirs, since their trees share nodes
 * and pages (see "Clones" at the top). It goes with the last of them.
 */
struct ram_arena {
	/*
	 * Shared by READ/WRITE of every device of the arena (which only add
	 * to their trees and copy what is shared), exclusive for
	 * DISCARD/WRITE_ZEROES, snapshot calls, clones and closes (which drop
	 * references and free): one acquisition per I/O, and no page can
	 * vanish under a reader's memcpy. A big-reader lock: a read
	 * writes only its thread's own line (the I/O threads of every device
	 * of the arena would otherwise all write the lock's count twice per
	 * I/O); a writer waits for every thread's claim to go. Readers that
	 * find a writer waiting wait behind it, so a stream of reads cannot
	 * starve a discard.
	 */
	struct brlock lock;
	/*
	 * lock: the trees of the arena: each device's own, its snapshots',
	 * and a save's. With one, nothing is shared (invariant 5).
	 */
	unsigned int nr_trees;
	/* lock: the devices that use the arena; written under registry_lock too */
	unsigned int nr_devs;
	/* the device that made the arena, for ram_test_slab_mapped (never dereferenced) */
	struct blk_backend *first;

	pthread_mutex_t alloc_lock;	/* the slab fields below and in each slab */
	struct ram_slab *cur;		/* alloc_lock: slab fresh pages come from */
	struct ram_slab *partial;	/* alloc_lock: slabs with freed pages */
	struct ram_slab *slabs;		/* alloc_lock: every slab, for close */
	struct ram_slab *spare;		/* alloc_lock: the reserve, empty slabs */
	unsigned int nr_spare;		/* alloc_lock */
	struct ram_slab *release;	/* alloc_lock: empty slabs to unmap */
	unsigned int reserve;		/* slabs to keep in the reserve; 0: off; set at open */
	bool reserve_on;		/* alloc_lock: a slab was taken: keep the reserve full */
	bool stopping;			/* alloc_lock: close: the arena thread ends */
	bool have_thread;		/* the arena thread runs; set at open */
	pthread_cond_t thread_cv;	/* alloc_lock: work for the arena thread */
	pthread_t thread;

	/* Counters for ->stat; atomic, read without a lock. */
	uint64_t nr_pages;		/* data pages, all trees */
	uint64_t nr_nodes;		/* nodes, all trees */
	uint64_t nr_slabs;		/* slabs mapped, the reserve included */
	uint64_t nr_reserve_misses;	/* a writer mapped a slab: the reserve was empty */
	uint64_t nr_spare_stat;		/* nr_spare, for ->stat */

	/*
	 * Atomic: a mapped read against an in-place write of the same page,
	 * by the page's address (ram_stripe()). Bit 0: a writer holds the
	 * stripe or waits for its readers to leave; above it, 2 per read
	 * that holds it. See ram_read_map().
	 */
	uint32_t stripe[RAM_STRIPES];
};

struct ram_dev {
	struct blk_backend be;		/* must come first */
	/* set at open; size changes only in ram_resize(), with ctl_lock and ar->lock exclusive */
	struct blk_geometry geo;
	/* page-index bits below the root's slots: grows with the size (ram_resize()) */
	unsigned int root_shift;
	char dev[64];			/* device name, for messages and clone = DEV@SNAP */
	char clone_of[64 + BLK_SNAP_NAME_MAX + 2];	/* "DEV@SNAP", or "" */

	/*
	 * The device's tree (NULL: nothing written). Loaded with acquire;
	 * swapped by a writer copying a shared root (CAS, under ar->lock
	 * shared) or by a snapshot call (under ar->lock exclusive). A
	 * struct ram_node, typed as a slot is.
	 */
	void *root;
	struct ram_arena *ar;		/* set at open */
	/* ar->lock: this device's trees besides its own: snapshots and a save's */
	unsigned int nr_snaps;
	/*
	 * Atomic: DISCARD/WRITE_ZEROES of this device inside ram_submit(),
	 * for ram_snap_reset()'s check; a READ or WRITE inside is a read claim
	 * tagged with the device (brlock_nr_tagged()).
	 */
	unsigned int nr_inside;

	pthread_mutex_t ctl_lock;	/* one snapshot call at a time */
	struct ram_snap *snaps;		/* ctl_lock: named snapshots, oldest first */
	unsigned int nr_named;		/* ctl_lock */
	struct ram_dev *reg_next;	/* registry_lock: ram_registry */

	/* Counters for ->stat; atomic, read without a lock. */
	uint64_t nr_cow_pages;		/* pages copied on a write to shared data */
	uint64_t nr_cow_nodes;		/* nodes copied on the way */
};

/* Pages a writer holds between taking them from the allocator and using them. */
struct ram_stash {
	unsigned int nr;
	void *page[RAM_STASH];
	bool zero[RAM_STASH];	/* known to be all zeros (fresh from the OS) */
};

/* Where a data I/O is in its iovec. */
struct ram_iter {
	const struct iovec *iov;
	int nr;		/* the vector's length: the I/O's bytes never run past it */
	int i;
	size_t off;
};

static inline uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

static void iter_copy_out(struct ram_iter *it, const unsigned char *src, size_t n)
{
	while (n) {
		const struct iovec *v = &it->iov[it->i];
		size_t c;

		assert(it->i < it->nr);		/* the vector adds up to the I/O's length */
		c = min_u64(n, v->iov_len - it->off);

		memcpy((unsigned char *)v->iov_base + it->off, src, c);
		src += c;
		n -= c;
		it->off += c;
		if (it->off == v->iov_len) {
			it->i++;
			it->off = 0;
		}
	}
}

/*
 * Into the arena: whole aligned pieces with streaming stores (copy.h): the
 * arena is not read back soon, and skipping the read-for-ownership made a
 * page copy out of a 256 MiB pool ~40% faster here (4.9 -> 6.9 GB/s).
 */
static void iter_copy_in(struct ram_iter *it, unsigned char *dst, size_t n)
{
	while (n) {
		const struct iovec *v = &it->iov[it->i];
		size_t c;

		assert(it->i < it->nr);		/* the vector adds up to the I/O's length */
		c = min_u64(n, v->iov_len - it->off);

		copy_big(dst, (const unsigned char *)v->iov_base + it->off, c);
		dst += c;
		n -= c;
		it->off += c;
		if (it->off == v->iov_len) {
			it->i++;
			it->off = 0;
		}
	}
}

static void iter_zero(struct ram_iter *it, uint64_t n)
{
	while (n) {
		const struct iovec *v = &it->iov[it->i];
		size_t c;

		assert(it->i < it->nr);		/* the vector adds up to the I/O's length */
		c = min_u64(n, v->iov_len - it->off);

		memset((unsigned char *)v->iov_base + it->off, 0, c);
		n -= c;
		it->off += c;
		if (it->off == v->iov_len) {
			it->i++;
			it->off = 0;
		}
	}
}

static bool page_is_zero(const void *p, size_t n)
{
	const uint64_t *w = p;
	size_t i;

	for (i = 0; i < n / 8; i++)
		if (w[i])
			return false;
	return true;
}

/* ---- slabs: where page memory comes from ---- */

static inline struct ram_slab *slab_of(const void *page)
{
	return (struct ram_slab *)((uintptr_t)page & ~(RAM_SLAB_SIZE - 1));
}

static inline unsigned int slab_idx(const struct ram_slab *s, const void *page)
{
	return (unsigned int)(((uintptr_t)page - (uintptr_t)s) >> RAM_PAGE_SHIFT);
}

static inline void *slab_page(struct ram_slab *s, unsigned int idx)
{
	return (unsigned char *)s + ((size_t)idx << RAM_PAGE_SHIFT);
}

/* ---- reference counts (see the top of the file) ---- */

static inline uint32_t *ref_of(const void *page)
{
	struct ram_slab *s = slab_of(page);

	return &s->ref[slab_idx(s, page)];
}

static inline uint32_t ref_load(const void *page)
{
	return __atomic_load_n(ref_of(page), __ATOMIC_ACQUIRE);
}

static inline void ref_get(const void *page)
{
	__atomic_add_fetch(ref_of(page), 1, __ATOMIC_RELAXED);
}

/* Drop a reference that is not the last (another tree holds one): invariant 3. */
static inline void ref_drop_shared(const void *page)
{
	uint32_t old = __atomic_fetch_sub(ref_of(page), 1, __ATOMIC_RELEASE);

	assert(old >= 2);
	(void)old;
}

/*
 * Drop a reference; true when it was the last. rd->ar->lock exclusive: no one
 * else touches a count, so no locked instruction (a reset drops a count
 * per page it frees: 262144 of them for 1 GiB).
 */
static inline bool ref_put_locked(const void *page)
{
	uint32_t *ref = ref_of(page), old = __atomic_load_n(ref, __ATOMIC_RELAXED);

	assert(old >= 1);
	__atomic_store_n(ref, old - 1, __ATOMIC_RELAXED);
	return old == 1;
}

static void partial_add_locked(struct ram_arena *ar, struct ram_slab *s)
{
	s->prev = NULL;
	s->next = ar->partial;
	if (ar->partial)
		ar->partial->prev = s;
	ar->partial = s;
	s->listed = true;
}

static void partial_del_locked(struct ram_arena *ar, struct ram_slab *s)
{
	if (s->prev)
		s->prev->next = s->next;
	else
		ar->partial = s->next;
	if (s->next)
		s->next->prev = s->prev;
	s->listed = false;
}

/*
 * Map a 2 MiB slab, 2 MiB aligned so a page finds its header by masking its
 * address, and so the kernel can back it with one huge page. @populate:
 * fault it all in now (the refill thread does, off the I/O path).
 *
 * First writes through this backend, 1 MiB each, 2 GiB, medians of five
 * runs (2 vCPU Firecracker VM, kernel 6.18, THP "madvise", a busy host),
 * the slab mapped by the writer:
 *   plain mmap                        0.84 GB/s   (0.77 after a discard)
 *   + MADV_POPULATE_WRITE (populate)  0.78 GB/s   (0.83)
 *   + MADV_HUGEPAGE                   2.41 GB/s   (2.70)
 *   + MADV_HUGEPAGE + POPULATE_WRITE  1.23 GB/s   (1.91)
 * Overwrites run at 3.5-4.7 GB/s whatever the choice. MADV_HUGEPAGE is
 * kept. The guest hands freed memory back to the host (free page
 * reporting), so memory re-touched after a while can cost 0.4-0.8 GB/s
 * again with any of them: that is the host faulting, not this code.
 */
static struct ram_slab *ram_slab_map(bool populate)
{
	unsigned char *p, *a;
	size_t i;

	p = mmap(NULL, 2 * RAM_SLAB_SIZE, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	a = (unsigned char *)(((uintptr_t)p + RAM_SLAB_SIZE - 1) & ~(RAM_SLAB_SIZE - 1));
	if (a > p)
		munmap(p, a - p);
	if (a + RAM_SLAB_SIZE < p + 2 * RAM_SLAB_SIZE)
		munmap(a + RAM_SLAB_SIZE, p + 2 * RAM_SLAB_SIZE - (a + RAM_SLAB_SIZE));
	/* Advice only: without THP the slab still works, with 4 KiB faults. */
	madvise(a, RAM_SLAB_SIZE, MADV_HUGEPAGE);
	/* Older kernels lack MADV_POPULATE_WRITE: touch every page instead. */
	if (populate && madvise(a, RAM_SLAB_SIZE, MADV_POPULATE_WRITE))
		for (i = 0; i < RAM_SLAB_SIZE; i += RAM_PAGE_SIZE)
			*(volatile unsigned char *)(a + i) = 0;
	return (struct ram_slab *)a;
}

/* A slab, new or from the reserve, joins rd->ar->slabs with every page unused. */
static void ram_slab_init_locked(struct ram_arena *ar, struct ram_slab *s, bool dirty)
{
	s->nr_used = 0;
	s->next_fresh = 1;
	s->nr_freed = 0;
	s->listed = false;
	s->dirty = dirty;
	s->prev = s->next = NULL;
	s->all_prev = NULL;
	s->all_next = ar->slabs;
	if (ar->slabs)
		ar->slabs->all_prev = s;
	ar->slabs = s;
}

static void ram_slab_unlink_locked(struct ram_arena *ar, struct ram_slab *s)
{
	if (s->listed)
		partial_del_locked(ar, s);
	if (s->all_prev)
		s->all_prev->all_next = s->all_next;
	else
		ar->slabs = s->all_next;
	if (s->all_next)
		s->all_next->all_prev = s->all_prev;
	if (ar->cur == s)
		ar->cur = NULL;
}

static void spare_push_locked(struct ram_arena *ar, struct ram_slab *s)
{
	s->next = ar->spare;
	ar->spare = s;
	ar->nr_spare++;
	__atomic_store_n(&ar->nr_spare_stat, ar->nr_spare, __ATOMIC_RELAXED);
}

/*
 * A slab for fresh pages: from the reserve, else mapped here (the first
 * slab, a reserve that is off or ran dry). Taking one (re)starts the
 * refill thread. First touch of a slab mapped here faults it in (one huge
 * page) under alloc_lock; only writers that need new pages wait for it.
 */
static struct ram_slab *ram_slab_get_locked(struct ram_arena *ar)
{
	struct ram_slab *s = ar->spare;
	bool dirty = false;

	if (s) {
		ar->spare = s->next;
		ar->nr_spare--;
		__atomic_store_n(&ar->nr_spare_stat, ar->nr_spare, __ATOMIC_RELAXED);
		dirty = s->dirty;
	} else {
		if (ar->reserve && ar->reserve_on)
			__atomic_add_fetch(&ar->nr_reserve_misses, 1, __ATOMIC_RELAXED);
		s = ram_slab_map(false);
		if (!s)
			return NULL;
		__atomic_add_fetch(&ar->nr_slabs, 1, __ATOMIC_RELAXED);
	}
	ram_slab_init_locked(ar, s, dirty);
	if (ar->reserve) {
		ar->reserve_on = true;
		pthread_cond_signal(&ar->thread_cv);
	}
	return s;
}

/*
 * A slab with no page in use: into the reserve while it has room (its
 * memory is touched already; its pages are not zero), else to the arena
 * thread, which gives it back to the system: unmapping costs 0.05-0.3 ms a
 * slab here, 25-150 ms for the 1 GiB a reset may drop, which neither a
 * reset nor a discard (ar->lock exclusive) should wait for.
 */
static void ram_slab_release_locked(struct ram_arena *ar, struct ram_slab *s)
{
	ram_slab_unlink_locked(ar, s);
	if (ar->nr_spare < ar->reserve && !ar->stopping) {
		s->dirty = true;
		spare_push_locked(ar, s);
		return;
	}
	s->next = ar->release;
	ar->release = s;
	pthread_cond_signal(&ar->thread_cv);
}

void (*ram_test_slab_mapped)(struct blk_backend *be);

/*
 * The arena thread: unmaps the slabs released, and keeps ar->reserve slabs
 * mapped and touched, so that a write that needs a new slab finds one
 * without a system call or a fault. It maps, touches and unmaps outside
 * alloc_lock; when memory is short it waits and tries again, and writers
 * map their own meanwhile.
 */
static void *ram_thread_fn(void *arg)
{
	struct ram_arena *ar = arg;

	pthread_mutex_lock(&ar->alloc_lock);
	for (;;) {
		struct ram_slab *s;

		while (!ar->stopping && !ar->release &&
		       !(ar->reserve_on && ar->nr_spare < ar->reserve))
			pthread_cond_wait(&ar->thread_cv, &ar->alloc_lock);
		if (ar->stopping)
			break;
		if (ar->release) {
			s = ar->release;
			ar->release = NULL;
			pthread_mutex_unlock(&ar->alloc_lock);
			while (s) {
				struct ram_slab *next = s->next;

				munmap(s, RAM_SLAB_SIZE);
				__atomic_sub_fetch(&ar->nr_slabs, 1, __ATOMIC_RELAXED);
				s = next;
			}
			pthread_mutex_lock(&ar->alloc_lock);
			continue;
		}
		pthread_mutex_unlock(&ar->alloc_lock);
		s = ram_slab_map(true);
		if (s && ram_test_slab_mapped)
			ram_test_slab_mapped(ar->first);
		pthread_mutex_lock(&ar->alloc_lock);
		if (!s) {
			blk_cond_wait_ms(&ar->thread_cv, &ar->alloc_lock, RAM_MAP_RETRY_MS);
			continue;
		}
		__atomic_add_fetch(&ar->nr_slabs, 1, __ATOMIC_RELAXED);
		/*
		 * The reserve may have filled while the lock was dropped (a
		 * discard's slabs go there first): a slab it has no room for
		 * is released, so the reserve never holds more than its size.
		 */
		if (ar->nr_spare >= ar->reserve || ar->stopping) {
			s->next = ar->release;
			ar->release = s;
			continue;
		}
		s->dirty = false;
		spare_push_locked(ar, s);
	}
	pthread_mutex_unlock(&ar->alloc_lock);
	return NULL;
}

/*
 * One page (for a node or data) with one reference: freed pages (already
 * touched) first, then fresh ones. *@zero: known to be all zeros.
 */
static void *ram_page_take_locked(struct ram_arena *ar, bool *zero)
{
	struct ram_slab *s = ar->partial;
	unsigned int idx;

	if (s) {
		idx = s->freed[--s->nr_freed];
		*zero = false;
		if (!s->nr_freed)
			partial_del_locked(ar, s);
	} else {
		s = ar->cur;
		if (!s || s->next_fresh == RAM_SLAB_PAGES) {
			s = ram_slab_get_locked(ar);
			if (!s)
				return NULL;
			ar->cur = s;
		}
		idx = s->next_fresh++;
		*zero = !s->dirty;
	}
	s->nr_used++;
	__atomic_store_n(&s->ref[idx], 1, __ATOMIC_RELAXED);
	return slab_page(s, idx);
}

/*
 * Give a page back (no reference left). A slab left with no page in use
 * leaves (ram_slab_release_locked()), except the one fresh pages are
 * carved from.
 */
static void ram_page_free_locked(struct ram_arena *ar, void *page)
{
	struct ram_slab *s = slab_of(page);

	assert(s->nr_used > 0 && s->nr_freed < RAM_SLAB_PAGES - 1);
	__atomic_store_n(&s->ref[slab_idx(s, page)], 0, __ATOMIC_RELAXED);
	s->freed[s->nr_freed++] = (uint16_t)slab_idx(s, page);
	s->nr_used--;
	if (!s->nr_used && s != ar->cur) {
		ram_slab_release_locked(ar, s);
		return;
	}
	if (!s->listed)
		partial_add_locked(ar, s);
}

/* Top @st up to @want pages. */
static void ram_stash_fill(struct ram_arena *ar, struct ram_stash *st, unsigned int want)
{
	pthread_mutex_lock(&ar->alloc_lock);
	while (st->nr < want) {
		void *page = ram_page_take_locked(ar, &st->zero[st->nr]);

		if (!page)
			break;
		st->page[st->nr++] = page;
	}
	pthread_mutex_unlock(&ar->alloc_lock);
}

static void ram_stash_drain(struct ram_arena *ar, struct ram_stash *st)
{
	if (!st->nr)
		return;
	pthread_mutex_lock(&ar->alloc_lock);
	while (st->nr)
		ram_page_free_locked(ar, st->page[--st->nr]);
	pthread_mutex_unlock(&ar->alloc_lock);
}

/* A page from @st, refilled with up to @want when empty; NULL on ENOMEM. */
static void *stash_take(struct ram_arena *ar, struct ram_stash *st, uint64_t want, bool *zero)
{
	if (!st->nr) {
		ram_stash_fill(ar, st, (unsigned int)min_u64(want ? want : 1, RAM_STASH));
		if (!st->nr)
			return NULL;
	}
	st->nr--;
	*zero = st->zero[st->nr];
	return st->page[st->nr];
}

/* A page taken from @st and not published goes back (room: it was taken). */
static void stash_give(struct ram_stash *st, void *page, bool zero)
{
	assert(st->nr < RAM_STASH);
	st->page[st->nr] = page;
	st->zero[st->nr++] = zero;
}

/* ---- the tree under rd->ar->lock shared: READ and WRITE ---- */

/* The slots of the leaf that holds page @pg in the tree at @root, or NULL. */
static void **ram_leaf_find(struct ram_node *root, unsigned int root_shift, uint64_t pg)
{
	struct ram_node *node = root;
	unsigned int shift;

	if (!node)
		return NULL;
	for (shift = root_shift; shift; shift -= RAM_NODE_SHIFT) {
		node = __atomic_load_n(&node->slot[(pg >> shift) & RAM_NODE_MASK], __ATOMIC_ACQUIRE);
		if (!node)
			return NULL;
	}
	return node->slot;
}

/* Publish a new, zeroed node in the empty *@slot, or return the one another thread put there. */
static struct ram_node *ram_node_insert(struct ram_dev *rd, struct ram_stash *st, void **slot,
					uint64_t want)
{
	struct ram_node *node;
	void *old = NULL;
	bool zero;

	node = stash_take(rd->ar, st, want, &zero);
	if (!node)
		return NULL;
	if (!zero)
		memset(node, 0, sizeof(*node));
	if (__atomic_compare_exchange_n(slot, &old, (void *)node, false,
					__ATOMIC_RELEASE, __ATOMIC_ACQUIRE)) {
		__atomic_add_fetch(&rd->ar->nr_nodes, 1, __ATOMIC_RELAXED);
		return node;
	}
	stash_give(st, node, true);
	return old;
}

/*
 * Copy @node, which is shared, into *@slot (a slot of the device's own
 * region, or rd->root). The copy takes a reference on each child before it
 * is published; the winner drops one on the original after (invariants 2
 * to 4). A loser gives its references and its copy back. Either way the
 * caller reads *@slot again. Returns 0 or -ENOMEM.
 */
static int ram_node_cow(struct ram_dev *rd, struct ram_stash *st, void **slot,
			struct ram_node *node, uint64_t want)
{
	struct ram_node *copy;
	void *old = node;
	unsigned int i;
	bool zero;

	copy = stash_take(rd->ar, st, want, &zero);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, node, sizeof(*copy));	/* shared: not changing (invariant 1) */
	for (i = 0; i < RAM_NODE_SLOTS; i++)
		if (copy->slot[i])
			ref_get(copy->slot[i]);
	if (__atomic_compare_exchange_n(slot, &old, (void *)copy, false,
					__ATOMIC_RELEASE, __ATOMIC_ACQUIRE)) {
		ref_drop_shared(node);
		__atomic_add_fetch(&rd->ar->nr_nodes, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&rd->nr_cow_nodes, 1, __ATOMIC_RELAXED);
		return 0;
	}
	for (i = 0; i < RAM_NODE_SLOTS; i++)
		if (copy->slot[i])
			ref_drop_shared(copy->slot[i]);
	stash_give(st, copy, false);
	return 0;
}

/*
 * The slots of the leaf for page @pg in the device's tree, for a write:
 * missing nodes are added and, with @cow, nodes shared with another tree
 * are copied on the way (ram_node_cow()), so that the leaf returned is the
 * device's own for the rest of the I/O. NULL when out of memory. @want:
 * pages the write may still need, for the stash.
 */
static void **ram_leaf_write(struct ram_dev *rd, struct ram_stash *st, uint64_t pg,
			     uint64_t want, bool cow)
{
	void **slot = &rd->root;
	unsigned int shift = rd->root_shift;

	for (;;) {
		struct ram_node *node = __atomic_load_n(slot, __ATOMIC_ACQUIRE);

		if (!node) {
			/* A node that fills an empty slot is new: count 1, own. */
			node = ram_node_insert(rd, st, slot, want);
			if (!node)
				return NULL;
		} else if (cow) {
			if (ref_load(node) > 1) {
				if (ram_node_cow(rd, st, slot, node, want))
					return NULL;
				continue;
			}
			if (__atomic_load_n(slot, __ATOMIC_ACQUIRE) != (void *)node)
				continue;	/* just replaced: a snapshot's now (invariant 4) */
		}
		if (!shift)
			return node->slot;
		slot = &node->slot[(pg >> shift) & RAM_NODE_MASK];
		shift -= RAM_NODE_SHIFT;
	}
}

/*
 * Page stripes, and mapped reads (BLK_IO_MAPPED, backend.h). A READ runs
 * under the arena lock shared and so does a WRITE into a page the device
 * owns (in place): the two may overlap. Without more, a read racing a
 * write sees part of it: seen here with O_DIRECT writers and readers of
 * the same blocks through the mount (tests/integ/odirect_race.c) within a
 * few hundred reads, when the read copied out, and sooner when it maps
 * (end_io replies from the pages: a writev(2) to /dev/fuse, the kernel
 * copies them microseconds later). So each page's stripe (by its address)
 * is held shared by a read while it copies the page out (ram_read(), one
 * page at a time) or, for a mapped read, for all its pages from before the
 * reply is built until end_io returns; an in-place write holds its page's
 * stripe exclusive for its memcpy. A reply carries one write's version of
 * each 4 KiB page (of a block up to the page size, then: a block of 16 KiB
 * is four pages, each whole, not necessarily of one write). The other ways a
 * write changes what a slot holds keep a mapped page whole anyway: a copy
 * of a shared page publishes a new page (the mapped one is unchanged,
 * invariant 1), a write into a hole publishes a page filled whole (the
 * read maps zeros), and DISCARD/WRITE_ZEROES wait for the arena lock,
 * which the read holds through end_io.
 *
 * No deadlock: a mapped read takes its stripes with try-locks, all or
 * none, and never waits while it holds one (a copying read holds one at a
 * time, for a memcpy); a writer holds one stripe at a time and
 * waits only for readers inside an end_io (the reply: a write to
 * /dev/fuse), which wait for no writer. A writer claims the stripe first
 * (bit 0), so a stream of reads of the page cannot starve it. The cost:
 * two locked instructions per page on a line of the stripe table, for
 * reads and in-place writes (1024 stripes of 4 bytes: 16 to a line).
 */
static const unsigned char ram_zero_map[RAM_ZERO_MAP] __attribute__((aligned(4096)));

static inline uint32_t *ram_stripe(struct ram_arena *ar, const void *page)
{
	return &ar->stripe[((uintptr_t)page >> RAM_PAGE_SHIFT) & (RAM_STRIPES - 1)];
}

static bool stripe_read_trylock(uint32_t *st)
{
	uint32_t v = __atomic_load_n(st, __ATOMIC_RELAXED);

	while (!(v & 1))
		if (__atomic_compare_exchange_n(st, &v, v + 2, true, __ATOMIC_ACQUIRE,
						__ATOMIC_RELAXED))
			return true;
	return false;
}

static void stripe_read_unlock(uint32_t *st)
{
	__atomic_sub_fetch(st, 2, __ATOMIC_RELEASE);
}

static void stripe_spin(unsigned int *n)
{
	if (++*n < 64) {
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#endif
	} else {
		sched_yield();
	}
}

static void stripe_write_lock(uint32_t *st)
{
	unsigned int n = 0;

	while (__atomic_fetch_or(st, 1, __ATOMIC_ACQUIRE) & 1)
		stripe_spin(&n);	/* another writer of the stripe */
	while (__atomic_load_n(st, __ATOMIC_ACQUIRE) != 1)
		stripe_spin(&n);	/* readers inside their end_io */
}

static void stripe_write_unlock(uint32_t *st)
{
	/* no reader entered while bit 0 was set, and no other writer holds it */
	__atomic_store_n(st, 0, __ATOMIC_RELEASE);
}

static void ram_read(struct ram_dev *rd, const struct blk_io *io)
{
	struct ram_iter it = { .iov = io->iov, .nr = io->iovcnt };
	uint64_t pos = io->pos, end = io->pos + io->len;
	uint64_t leaf_id = UINT64_MAX;
	void **leaf = NULL;

	while (pos < end) {
		uint64_t pg = pos >> RAM_PAGE_SHIFT;
		size_t off = pos & RAM_PAGE_MASK;
		uint64_t n;
		unsigned char *page;

		if (pg >> RAM_NODE_SHIFT != leaf_id) {
			leaf_id = pg >> RAM_NODE_SHIFT;
			leaf = ram_leaf_find(__atomic_load_n(&rd->root, __ATOMIC_ACQUIRE),
					     rd->root_shift, pg);
		}
		if (!leaf) {
			/* No leaf: nothing in its 2 MiB was ever written. */
			n = ((uint64_t)(RAM_NODE_SLOTS - (pg & RAM_NODE_MASK)) << RAM_PAGE_SHIFT) - off;
			n = min_u64(n, end - pos);
			iter_zero(&it, n);
			pos += n;
			continue;
		}
		n = min_u64(RAM_PAGE_SIZE - off, end - pos);
		page = __atomic_load_n(&leaf[pg & RAM_NODE_MASK], __ATOMIC_ACQUIRE);
		if (page) {
			/* one write's version of the page, as a mapped read gets */
			uint32_t *stripe = ram_stripe(rd->ar, page);
			unsigned int spins = 0;

			while (!stripe_read_trylock(stripe))
				stripe_spin(&spins);
			iter_copy_out(&it, page + off, n);
			stripe_read_unlock(stripe);
		} else {
			iter_zero(&it, n);
		}
		pos += n;
	}
}

/* Append @n bytes of zeros to @map; false when it would pass RAM_MAP_MAX. */
static bool map_zero(struct iovec *map, unsigned int *cnt, uint64_t n)
{
	while (n) {
		struct iovec *last = *cnt ? &map[*cnt - 1] : NULL;
		size_t room;

		if (last && last->iov_base == ram_zero_map && last->iov_len < RAM_ZERO_MAP) {
			room = RAM_ZERO_MAP - last->iov_len;
			room = min_u64(room, n);
			last->iov_len += room;
			n -= room;
			continue;
		}
		if (*cnt == RAM_MAP_MAX)
			return false;
		room = min_u64(RAM_ZERO_MAP, n);
		map[*cnt].iov_base = (void *)ram_zero_map;
		map[*cnt].iov_len = room;
		++*cnt;
		n -= room;
	}
	return true;
}

/*
 * A READ with BLK_IO_MAPPED, ar->lock held shared: end @io with a mapping
 * of the arena (its pages, ram_zero_map for holes), while the lock and the
 * pages' stripes are still held. False (nothing ended) when the range
 * needs more than RAM_MAP_MAX segments: the caller copies.
 */
static bool ram_read_map(struct ram_dev *rd, struct blk_io *io)
{
	struct ram_arena *ar = rd->ar;
	struct iovec map[RAM_MAP_MAX];
	uint32_t *held[RAM_MAP_MAX];
	unsigned int cnt = 0, nr_held = 0, i, spins = 0;
	uint64_t pos = io->pos, end = io->pos + io->len;
	uint64_t leaf_id = UINT64_MAX;
	void **leaf = NULL;

	while (pos < end) {
		uint64_t pg = pos >> RAM_PAGE_SHIFT;
		size_t off = pos & RAM_PAGE_MASK;
		uint64_t n;
		unsigned char *page;

		if (pg >> RAM_NODE_SHIFT != leaf_id) {
			leaf_id = pg >> RAM_NODE_SHIFT;
			leaf = ram_leaf_find(__atomic_load_n(&rd->root, __ATOMIC_ACQUIRE),
					     rd->root_shift, pg);
		}
		if (!leaf) {
			n = ((uint64_t)(RAM_NODE_SLOTS - (pg & RAM_NODE_MASK)) << RAM_PAGE_SHIFT) - off;
			n = min_u64(n, end - pos);
			if (!map_zero(map, &cnt, n))
				return false;
			pos += n;
			continue;
		}
		n = min_u64(RAM_PAGE_SIZE - off, end - pos);
		page = __atomic_load_n(&leaf[pg & RAM_NODE_MASK], __ATOMIC_ACQUIRE);
		if (!page) {
			if (!map_zero(map, &cnt, n))
				return false;
		} else {
			if (cnt == RAM_MAP_MAX)
				return false;
			map[cnt].iov_base = page + off;
			map[cnt].iov_len = n;
			held[nr_held++] = ram_stripe(ar, page);
			cnt++;
		}
		pos += n;
	}
	/*
	 * The pages' stripes, all or none: an in-place writer inside one is
	 * finishing its memcpy (a few hundred ns) and then the page is whole.
	 * A page the walk found cannot have been freed or replaced by another
	 * (ar->lock shared): what it holds once its stripe is ours is one
	 * write's version, and stays so until end_io returns.
	 */
	for (;;) {
		for (i = 0; i < nr_held && stripe_read_trylock(held[i]); i++)
			;
		if (i == nr_held)
			break;
		while (i--)
			stripe_read_unlock(held[i]);
		stripe_spin(&spins);
	}
	io->map = map;
	io->mapcnt = cnt;
	io->end_io(io, 0);
	/* @io may be gone: only the stripes now */
	for (i = 0; i < nr_held; i++)
		stripe_read_unlock(held[i]);
	return true;
}

static int ram_write(struct ram_dev *rd, const struct blk_io *io)
{
	/* Stable during the I/O: it changes only under ar->lock exclusive. */
	bool cow = rd->ar->nr_trees > 1;
	struct ram_iter it = { .iov = io->iov, .nr = io->iovcnt };
	uint64_t pos = io->pos, end = io->pos + io->len;
	uint64_t last_pg = (end - 1) >> RAM_PAGE_SHIFT;
	uint64_t leaf_id = UINT64_MAX, added = 0, cowed = 0;
	struct ram_stash st = { .nr = 0 };
	void **leaf = NULL;
	int ret = 0;

	while (pos < end) {
		uint64_t pg = pos >> RAM_PAGE_SHIFT;
		uint64_t want = last_pg - pg + 1;	/* pages the write may still need */
		size_t off = pos & RAM_PAGE_MASK;
		size_t n = min_u64(RAM_PAGE_SIZE - off, end - pos);
		struct ram_iter saved;
		unsigned char *page, *np;
		void **slot;
		void *old;
		bool zero;

		if (pg >> RAM_NODE_SHIFT != leaf_id) {
			leaf = ram_leaf_write(rd, &st, pg, want, cow);
			if (!leaf) {
				ret = -ENOMEM;
				break;
			}
			leaf_id = pg >> RAM_NODE_SHIFT;
		}
		slot = &leaf[pg & RAM_NODE_MASK];
		page = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
		if (page && cow && ref_load(page) > 1) {
			/*
			 * Shared: write a copy (the old bytes around the new)
			 * and publish it whole.
			 */
			np = stash_take(rd->ar, &st, want, &zero);
			if (!np) {
				ret = -ENOMEM;
				break;
			}
			if (off)
				memcpy(np, page, off);
			if (off + n < RAM_PAGE_SIZE)
				memcpy(np + off + n, page + off + n, RAM_PAGE_SIZE - off - n);
			saved = it;
			iter_copy_in(&it, np + off, n);
			old = page;
			if (__atomic_compare_exchange_n(slot, &old, (void *)np, false, __ATOMIC_RELEASE,
							__ATOMIC_ACQUIRE)) {
				ref_drop_shared(page);
				added++;
				cowed++;
				pos += n;
			} else {
				/* Another writer copied it first: write into its copy. */
				stash_give(&st, np, false);
				it = saved;
			}
			continue;
		}
		if (page) {
			uint32_t *stripe;

			if (cow && __atomic_load_n(slot, __ATOMIC_ACQUIRE) != (void *)page)
				continue;	/* just replaced: a snapshot's now (invariant 4) */
			/* not under a mapped read's reply (ram_read_map()) */
			stripe = ram_stripe(rd->ar, page);
			stripe_write_lock(stripe);
			iter_copy_in(&it, page + off, n);
			stripe_write_unlock(stripe);
			pos += n;
			continue;
		}

		page = stash_take(rd->ar, &st, want, &zero);
		if (!page) {
			ret = -ENOMEM;
			break;
		}
		/*
		 * Fill the whole page before it is published: a reader of the
		 * part this write does not cover must see zeros, never what a
		 * reused page held before.
		 */
		if (!zero) {
			memset(page, 0, off);
			memset(page + off + n, 0, RAM_PAGE_SIZE - off - n);
		}
		saved = it;
		iter_copy_in(&it, page + off, n);
		old = NULL;
		if (__atomic_compare_exchange_n(slot, &old, (void *)page, false, __ATOMIC_RELEASE,
						__ATOMIC_ACQUIRE)) {
			added++;
			pos += n;
		} else {
			/* Another writer published this page first: write into its page. */
			stash_give(&st, page, false);
			it = saved;
		}
	}
	ram_stash_drain(rd->ar, &st);
	if (added)
		__atomic_add_fetch(&rd->ar->nr_pages, added, __ATOMIC_RELAXED);
	if (cowed)
		__atomic_add_fetch(&rd->nr_cow_pages, cowed, __ATOMIC_RELAXED);
	return ret;
}

/* ---- the tree under rd->ar->lock exclusive (and alloc_lock) ---- */

/* Drop a reference to a data page; free it with the last (counted in *@nr_freed). */
static void ram_data_put_locked(struct ram_dev *rd, void *page, uint64_t *nr_freed)
{
	if (ref_put_locked(page)) {
		ram_page_free_locked(rd->ar, page);
		(*nr_freed)++;
	}
}

static void ram_subtree_put_locked(struct ram_dev *rd, struct ram_node *node, unsigned int shift,
				   uint64_t *nr_pages, uint64_t *nr_nodes)
{
	unsigned int i;

	if (!ref_put_locked(node))
		return;
	for (i = 0; i < RAM_NODE_SLOTS; i++) {
		void *child = node->slot[i];

		if (!child)
			continue;
		if (shift)
			ram_subtree_put_locked(rd, child, shift - RAM_NODE_SHIFT, nr_pages, nr_nodes);
		else
			ram_data_put_locked(rd, child, nr_pages);
	}
	ram_page_free_locked(rd->ar, node);
	(*nr_nodes)++;
}

/* Drop a reference to @node (at @shift); with the last, free it and drop its children. */
static void ram_tree_put_locked(struct ram_dev *rd, struct ram_node *node, unsigned int shift)
{
	uint64_t nr_pages = 0, nr_nodes = 0;

	ram_subtree_put_locked(rd, node, shift, &nr_pages, &nr_nodes);
	__atomic_sub_fetch(&rd->ar->nr_pages, nr_pages, __ATOMIC_RELAXED);
	__atomic_sub_fetch(&rd->ar->nr_nodes, nr_nodes, __ATOMIC_RELAXED);
}

/* Make the node in *@slotp the device's own: copy it if it is shared. NULL on ENOMEM. */
static struct ram_node *ram_node_own_locked(struct ram_dev *rd, void **slotp)
{
	struct ram_node *node = *slotp, *copy;
	unsigned int i;
	bool zero;

	if (ref_load(node) == 1)
		return node;
	copy = ram_page_take_locked(rd->ar, &zero);
	if (!copy)
		return NULL;
	memcpy(copy, node, sizeof(*copy));
	for (i = 0; i < RAM_NODE_SLOTS; i++)
		if (copy->slot[i])
			ref_get(copy->slot[i]);
	ref_drop_shared(node);
	__atomic_store_n(slotp, (void *)copy, __ATOMIC_RELEASE);
	__atomic_add_fetch(&rd->ar->nr_nodes, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&rd->nr_cow_nodes, 1, __ATOMIC_RELAXED);
	return copy;
}

static bool node_empty(const struct ram_node *node)
{
	unsigned int i;

	for (i = 0; i < RAM_NODE_SLOTS; i++)
		if (node->slot[i])
			return false;
	return true;
}

/*
 * Drop the device's pages [@start, @end) (page indexes) under *@slotp, a
 * node at @shift mapping pages from @base: a subtree wholly inside is
 * dropped in one go (shared: its count falls, nothing else is touched);
 * one partly inside is made the device's own first. Nodes left empty are
 * freed. Returns 0, or -ENOMEM when a shared node could not be copied
 * (what was dropped before stays dropped).
 */
static int ram_punch_locked(struct ram_dev *rd, void **slotp, unsigned int shift,
			    uint64_t base, uint64_t start, uint64_t end)
{
	uint64_t span = (uint64_t)RAM_NODE_SLOTS << shift;
	struct ram_node *node = *slotp;
	uint64_t lo, hi, i;
	int ret = 0;

	if (!node)
		return 0;
	if (start <= base && end >= base + span) {
		ram_tree_put_locked(rd, node, shift);
		__atomic_store_n(slotp, NULL, __ATOMIC_RELAXED);
		return 0;
	}
	node = ram_node_own_locked(rd, slotp);
	if (!node)
		return -ENOMEM;
	lo = (start > base ? start - base : 0) >> shift;
	hi = min_u64(RAM_NODE_SLOTS, (end - base + (1ull << shift) - 1) >> shift);
	for (i = lo; i < hi && !ret; i++) {
		if (shift) {
			ret = ram_punch_locked(rd, &node->slot[i], shift - RAM_NODE_SHIFT,
					       base + (i << shift), start, end);
		} else if (node->slot[i]) {
			uint64_t nr_freed = 0;

			ram_data_put_locked(rd, node->slot[i], &nr_freed);
			__atomic_sub_fetch(&rd->ar->nr_pages, nr_freed, __ATOMIC_RELAXED);
			__atomic_store_n(&node->slot[i], NULL, __ATOMIC_RELAXED);
		}
	}
	if (node_empty(node)) {
		ram_tree_put_locked(rd, node, shift);
		__atomic_store_n(slotp, NULL, __ATOMIC_RELAXED);
	}
	return ret;
}

/* Zero part of one page, if it exists (copied first if shared). */
static int ram_zero_partial_locked(struct ram_dev *rd, uint64_t pos, uint64_t n)
{
	uint64_t pg = pos >> RAM_PAGE_SHIFT;
	void **leaf = ram_leaf_find(rd->root, rd->root_shift, pg);
	unsigned int shift = rd->root_shift;
	void **slot = &rd->root;
	unsigned char *page, *copy;
	bool zero;

	if (!leaf || !leaf[pg & RAM_NODE_MASK])
		return 0;
	/* It exists: make its path the device's own. */
	for (;;) {
		struct ram_node *node = ram_node_own_locked(rd, slot);

		if (!node)
			return -ENOMEM;
		slot = &node->slot[(pg >> shift) & RAM_NODE_MASK];
		if (!shift)
			break;
		shift -= RAM_NODE_SHIFT;
	}
	page = *slot;
	if (ref_load(page) > 1) {
		copy = ram_page_take_locked(rd->ar, &zero);
		if (!copy)
			return -ENOMEM;
		memcpy(copy, page, RAM_PAGE_SIZE);
		ref_drop_shared(page);
		__atomic_store_n(slot, (void *)copy, __ATOMIC_RELEASE);
		__atomic_add_fetch(&rd->ar->nr_pages, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&rd->nr_cow_pages, 1, __ATOMIC_RELAXED);
		page = copy;
	}
	memset(page + (pos & RAM_PAGE_MASK), 0, n);
	return 0;
}

/* DISCARD and WRITE_ZEROES: whole pages are dropped, partial ones zeroed. */
static int ram_zero_range_locked(struct ram_dev *rd, uint64_t pos, uint64_t len)
{
	struct ram_arena *ar = rd->ar;
	uint64_t end = pos + len;
	int ret = 0;

	pthread_mutex_lock(&ar->alloc_lock);
	if (pos & RAM_PAGE_MASK) {
		uint64_t n = min_u64(end - pos, RAM_PAGE_SIZE - (pos & RAM_PAGE_MASK));

		ret = ram_zero_partial_locked(rd, pos, n);
		pos += n;
	}
	if (!ret && end - pos >= RAM_PAGE_SIZE) {
		uint64_t first = pos >> RAM_PAGE_SHIFT;
		uint64_t last = end >> RAM_PAGE_SHIFT;

		ret = ram_punch_locked(rd, &rd->root, rd->root_shift, 0, first, last);
		pos = last << RAM_PAGE_SHIFT;
	}
	if (!ret && pos < end)
		ret = ram_zero_partial_locked(rd, pos, end - pos);
	pthread_mutex_unlock(&ar->alloc_lock);
	return ret;
}

/*
 * An I/O of @rd is inside ar->lock. A reset asserts that none is: the lock
 * alone cannot say whose I/O holds it once clones share it
 * (ram_snap_reset()). A READ or WRITE says so in its thread's read claim
 * (tagged with @rd: no shared line is written); a DISCARD, under the lock
 * exclusive, in rd->nr_inside.
 */
static inline void ram_io_enter_excl(struct ram_dev *rd)
{
	__atomic_add_fetch(&rd->nr_inside, 1, __ATOMIC_RELAXED);
}

static inline void ram_io_leave_excl(struct ram_dev *rd)
{
	__atomic_sub_fetch(&rd->nr_inside, 1, __ATOMIC_RELAXED);
}

static unsigned int ram_io_inside(struct ram_dev *rd)
{
	return __atomic_load_n(&rd->nr_inside, __ATOMIC_RELAXED) +
	       brlock_nr_tagged(&rd->ar->lock, rd);
}

static int ram_submit(struct blk_backend *be, struct blk_io *io)
{
	struct ram_dev *rd = (struct ram_dev *)be;
	struct ram_arena *ar = rd->ar;
	int ret = 0;

	switch (io->op) {
	case BLK_READ:
		brlock_read_lock(&ar->lock, rd);
		/* a mapped read is ended inside, under the lock (backend.h) */
		if ((io->flags & BLK_IO_MAPPED) && ram_read_map(rd, io)) {
			brlock_read_unlock(&ar->lock);
			return 0;
		}
		ram_read(rd, io);
		brlock_read_unlock(&ar->lock);
		break;
	case BLK_WRITE:
		brlock_read_lock(&ar->lock, rd);
		ret = ram_write(rd, io);
		brlock_read_unlock(&ar->lock);
		break;
	case BLK_FLUSH:
		/* RAM is as stable as this device gets. */
		break;
	case BLK_DISCARD:
	case BLK_WRITE_ZEROES: {
		uint64_t pos = io->pos, end = io->pos + io->len;

		/*
		 * In 1 GiB pieces, so reads and writes get in between: a
		 * discard of a whole big device would otherwise stall all
		 * other I/O for as long as it takes to free it.
		 */
		while (pos < end && !ret) {
			uint64_t n = min_u64(end - pos, RAM_ZERO_CHUNK - (pos & (RAM_ZERO_CHUNK - 1)));

			brlock_write_lock(&ar->lock);
			ram_io_enter_excl(rd);
			ret = ram_zero_range_locked(rd, pos, n);
			ram_io_leave_excl(rd);
			brlock_write_unlock(&ar->lock);
			pos += n;
		}
		break;
	}
	default:
		return -EOPNOTSUPP;
	}
	io->end_io(io, ret);
	return 0;
}

/* ---- walks of a tree that does not change (a snapshot's) ---- */

/* Data pages mapped under @node (at @shift). */
static uint64_t ram_count_pages(const struct ram_node *node, unsigned int shift)
{
	uint64_t n = 0;
	unsigned int i;

	for (i = 0; i < RAM_NODE_SLOTS; i++) {
		const void *child = __atomic_load_n(&node->slot[i], __ATOMIC_RELAXED);

		if (child)
			n += shift ? ram_count_pages(child, shift - RAM_NODE_SHIFT) : 1;
	}
	return n;
}

/*
 * Bytes that only @node's tree references under @node, which has count 1
 * (it and the children of count 1 below it, recursively; a child shared
 * with another tree is not its alone, nor anything under it).
 */
static uint64_t ram_own_bytes(const struct ram_node *node, unsigned int shift)
{
	uint64_t bytes = RAM_PAGE_SIZE;
	unsigned int i;

	for (i = 0; i < RAM_NODE_SLOTS; i++) {
		const void *child = __atomic_load_n(&node->slot[i], __ATOMIC_RELAXED);

		if (!child || ref_load(child) != 1)
			continue;
		bytes += shift ? ram_own_bytes(child, shift - RAM_NODE_SHIFT) : RAM_PAGE_SIZE;
	}
	return bytes;
}

/* ---- save: a tree to a sparse image file ---- */

struct ram_saver {
	struct ram_dev *rd;
	int fd;
	const char *tmp;		/* for messages */
	struct iovec iov[RAM_IO_CHUNK / RAM_PAGE_SIZE];
	int nr;				/* iovecs gathered */
	uint64_t pos;			/* where iov[0] goes */
	uint64_t len;			/* their bytes */
	uint64_t saved;			/* bytes written, for the caller */
};

/* pwritev all of iov[], as many calls as it takes. */
static int saver_flush(struct ram_saver *sv)
{
	struct iovec *v = sv->iov;
	int cnt = sv->nr;
	uint64_t pos = sv->pos;

	while (cnt) {
		ssize_t w = pwritev(sv->fd, v, cnt, (off_t)pos);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (w == 0)
			return -EIO;
		pos += (uint64_t)w;
		while (cnt && (size_t)w >= v->iov_len) {
			w -= (ssize_t)v->iov_len;
			v++;
			cnt--;
		}
		if (cnt) {
			v->iov_base = (char *)v->iov_base + w;
			v->iov_len -= (size_t)w;
		}
	}
	sv->saved += sv->len;
	sv->nr = 0;
	sv->len = 0;
	return 0;
}

/* Page @pg (data at @page) into the image, unless it reads as zeros. */
static int saver_add(struct ram_saver *sv, uint64_t pg, const unsigned char *page)
{
	uint64_t pos = pg << RAM_PAGE_SHIFT;
	size_t n = (size_t)min_u64(RAM_PAGE_SIZE, sv->rd->geo.size - pos);
	int ret;

	if (page_is_zero(page, RAM_PAGE_SIZE))
		return 0;
	if (sv->nr && (sv->pos + sv->len != pos || sv->nr == (int)(sizeof(sv->iov) / sizeof(sv->iov[0])))) {
		ret = saver_flush(sv);
		if (ret)
			return ret;
	}
	if (!sv->nr)
		sv->pos = pos;
	sv->iov[sv->nr].iov_base = (void *)page;
	sv->iov[sv->nr++].iov_len = n;
	sv->len += n;
	return 0;
}

static int saver_walk(struct ram_saver *sv, const struct ram_node *node, unsigned int shift,
		      uint64_t base)
{
	unsigned int i;
	int ret;

	for (i = 0; i < RAM_NODE_SLOTS; i++) {
		const void *child = __atomic_load_n(&node->slot[i], __ATOMIC_RELAXED);

		if (!child)
			continue;
		if (shift)
			ret = saver_walk(sv, child, shift - RAM_NODE_SHIFT,
					 base + ((uint64_t)i << shift));
		else
			ret = saver_add(sv, base + i, child);
		if (ret)
			return ret;
	}
	return 0;
}

/* fsync the directory @path is in, so that a rename in it lasts. */
static int sync_parent_dir(const char *path)
{
	const char *slash = strrchr(path, '/');
	char dir[PATH_MAX];
	int fd, ret = 0;

	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == path)
		snprintf(dir, sizeof(dir), "/");
	else if ((size_t)(slash - path) < sizeof(dir))
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	else
		return -ENAMETOOLONG;
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fsync(fd))
		ret = -errno;
	close(fd);
	return ret;
}

/*
 * Write the tree at @root (not changing: a snapshot's, or a save's own
 * reference to the device's) to @path: a temporary file next to it, synced,
 * renamed over it. Logs the step that failed.
 */
static int ram_save_tree(struct ram_dev *rd, const struct ram_node *root, const char *what,
			 const char *path)
{
	struct ram_saver *sv;
	const char *step;
	char *tmp = NULL;
	int ret = 0;

	sv = calloc(1, sizeof(*sv));
	if (!sv || asprintf(&tmp, "%s.XXXXXX", path) < 0) {
		free(sv);
		blk_err("ram: %s: save %s to %s: out of memory", rd->dev, what, path);
		return -ENOMEM;
	}
	sv->rd = rd;
	sv->tmp = tmp;
	step = "create a temporary file for";
	sv->fd = mkostemp(tmp, O_CLOEXEC);
	if (sv->fd < 0) {
		ret = -errno;
		goto out_err;
	}
	step = "write";
	if (root) {
		ret = saver_walk(sv, root, rd->root_shift, 0);
		if (!ret && sv->nr)
			ret = saver_flush(sv);
		if (ret)
			goto out_unlink;
	}
	/* The size of the device; holes wherever nothing was written. */
	step = "set the size of";
	if (ftruncate(sv->fd, (off_t)rd->geo.size))
		goto out_errno;
	step = "fsync";
	if (fsync(sv->fd))
		goto out_errno;
	step = "close";
	ret = close(sv->fd) ? -errno : 0;
	sv->fd = -1;
	if (ret)
		goto out_unlink;
	step = "rename the temporary file over";
	if (rename(tmp, path))
		goto out_errno;
	step = "fsync the directory of";
	ret = sync_parent_dir(path);
	if (ret)
		goto out_err;	/* renamed: the image is there, maybe not durably */
	free(tmp);
	free(sv);
	return 0;

out_errno:
	ret = -errno;
out_unlink:
	if (sv->fd >= 0)
		close(sv->fd);
	unlink(tmp);
out_err:
	blk_err("ram: %s: save %s: cannot %s %s (temporary file %s): %s",
		rd->dev, what, step, path, tmp, strerror(-ret));
	free(tmp);
	free(sv);
	return ret;
}

/* ---- snapshots (struct blk_snap_ops) ---- */

static struct ram_snap *snap_find_locked(struct ram_dev *rd, const char *name, struct ram_snap ***prevp)
{
	struct ram_snap **pp, *s;

	for (pp = &rd->snaps; (s = *pp); pp = &s->next) {
		if (!strcmp(s->name, name)) {
			if (prevp)
				*prevp = pp;
			return s;
		}
	}
	return NULL;
}

/* A reference to the device's tree, counted in nr_snaps and nr_trees (ar->lock exclusive inside). */
static struct ram_node *ram_tree_share(struct ram_dev *rd)
{
	struct ram_arena *ar = rd->ar;
	struct ram_node *root;

	brlock_write_lock(&ar->lock);
	root = rd->root;
	if (root)
		ref_get(root);
	rd->nr_snaps++;
	ar->nr_trees++;
	brlock_write_unlock(&ar->lock);
	return root;
}

/* Drop a tree taken by ram_tree_share() or a snapshot's. */
static void ram_tree_drop(struct ram_dev *rd, struct ram_node *root)
{
	struct ram_arena *ar = rd->ar;
	brlock_write_lock(&ar->lock);
	pthread_mutex_lock(&ar->alloc_lock);
	if (root)
		ram_tree_put_locked(rd, root, rd->root_shift);
	assert(rd->nr_snaps > 0 && ar->nr_trees > 1);
	rd->nr_snaps--;
	ar->nr_trees--;
	pthread_mutex_unlock(&ar->alloc_lock);
	brlock_write_unlock(&ar->lock);
}

static int ram_snap_create(struct blk_backend *be, const char *name)
{
	struct ram_dev *rd = (struct ram_dev *)be;
	struct ram_snap *snap, **tail;
	int ret = 0;

	if (!blk_snap_name_valid(name))
		return -EINVAL;
	snap = calloc(1, sizeof(*snap));
	if (!snap)
		return -ENOMEM;
	snprintf(snap->name, sizeof(snap->name), "%s", name);
	snap->created = (uint64_t)time(NULL);
	snap->data_pages = UINT64_MAX;

	pthread_mutex_lock(&rd->ctl_lock);
	if (snap_find_locked(rd, name, NULL)) {
		ret = -EEXIST;
		goto out_unlock;
	}
	if (rd->nr_named >= BLK_SNAP_MAX) {
		ret = -EMLINK;
		goto out_unlock;
	}
	snap->root = ram_tree_share(rd);
	for (tail = &rd->snaps; *tail; tail = &(*tail)->next)
		;
	*tail = snap;
	rd->nr_named++;
	snap = NULL;
out_unlock:
	pthread_mutex_unlock(&rd->ctl_lock);
	free(snap);
	return ret;
}

static int ram_snap_destroy(struct blk_backend *be, const char *name)
{
	struct ram_dev *rd = (struct ram_dev *)be;
	struct ram_snap *snap, **pp;

	if (!blk_snap_name_valid(name))
		return -EINVAL;
	pthread_mutex_lock(&rd->ctl_lock);
	snap = snap_find_locked(rd, name, &pp);
	if (!snap) {
		pthread_mutex_unlock(&rd->ctl_lock);
		return -ENOENT;
	}
	*pp = snap->next;
	rd->nr_named--;
	ram_tree_drop(rd, snap->root);
	pthread_mutex_unlock(&rd->ctl_lock);
	free(snap);
	return 0;
}

static int ram_snap_reset(struct blk_backend *be, const char *name)
{
	struct ram_dev *rd = (struct ram_dev *)be;
	struct ram_arena *ar = rd->ar;
	struct ram_node *old;
	struct ram_snap *snap;
	int ret;

	if (!blk_snap_name_valid(name))
		return -EINVAL;
	pthread_mutex_lock(&rd->ctl_lock);
	snap = snap_find_locked(rd, name, NULL);
	if (!snap) {
		pthread_mutex_unlock(&rd->ctl_lock);
		return -ENOENT;
	}
	/*
	 * The caller quiesced the device (blk_snap_reset()): no I/O of its
	 * can be inside the backend. If one is, it races the reset, and which
	 * contents it touched is anyone's guess. The arena's lock may be busy
	 * with the I/O of other devices (clones share it): wait for those.
	 */
	ret = (int)ram_io_inside(rd);
	assert(ret == 0 && "ram: reset with I/O in flight: the device was not quiesced");
	brlock_write_lock(&ar->lock);
	pthread_mutex_lock(&ar->alloc_lock);
	/* Take the snapshot's tree first: it may be the very root we drop. */
	if (snap->root)
		ref_get(snap->root);
	old = rd->root;
	__atomic_store_n(&rd->root, snap->root, __ATOMIC_RELEASE);
	if (old)
		ram_tree_put_locked(rd, old, rd->root_shift);
	pthread_mutex_unlock(&ar->alloc_lock);
	brlock_write_unlock(&ar->lock);
	pthread_mutex_unlock(&rd->ctl_lock);
	return 0;
}

static int ram_snap_list(struct blk_backend *be, struct blk_snap_info *v, int nr)
{
	struct ram_dev *rd = (struct ram_dev *)be;
	struct ram_arena *ar = rd->ar;
	struct ram_snap *snap;
	int n = 0;

	pthread_mutex_lock(&rd->ctl_lock);
	/* Shared: no count reaches 0 and nothing is freed meanwhile. */
	brlock_read_lock(&ar->lock, NULL);
	for (snap = rd->snaps; snap; snap = snap->next, n++) {
		struct blk_snap_info *info;

		if (n >= nr)
			continue;
		info = &v[n];
		memset(info, 0, sizeof(*info));
		snprintf(info->name, sizeof(info->name), "%s", snap->name);
		info->created = snap->created;
		if (!snap->root)
			continue;
		if (snap->data_pages == UINT64_MAX)
			snap->data_pages = ram_count_pages(snap->root, rd->root_shift);
		info->data_bytes = min_u64(snap->data_pages << RAM_PAGE_SHIFT, rd->geo.size);
		if (ref_load(snap->root) == 1)
			info->own_bytes = ram_own_bytes(snap->root, rd->root_shift);
	}
	brlock_read_unlock(&ar->lock);
	pthread_mutex_unlock(&rd->ctl_lock);
	return n;
}

static int ram_snap_save(struct blk_backend *be, const char *name, const char *path)
{
	struct ram_dev *rd = (struct ram_dev *)be;
	struct ram_node *root;
	struct ram_snap *snap;
	char what[BLK_SNAP_NAME_MAX + 32];
	int ret;

	if (name && !blk_snap_name_valid(name))
		return -EINVAL;
	if (!path || !*path)
		return -EINVAL;
	pthread_mutex_lock(&rd->ctl_lock);
	if (name) {
		/* ctl_lock keeps it from being deleted; nothing writes it. */
		snap = snap_find_locked(rd, name, NULL);
		if (!snap) {
			pthread_mutex_unlock(&rd->ctl_lock);
			return -ENOENT;
		}
		snprintf(what, sizeof(what), "snapshot %s", name);
		ret = ram_save_tree(rd, snap->root, what, path);
	} else {
		/*
		 * The device at one instant: a tree of the save's own, which
		 * writes meanwhile copy away from, dropped at the end.
		 */
		root = ram_tree_share(rd);
		ret = ram_save_tree(rd, root, "the device", path);
		ram_tree_drop(rd, root);
	}
	pthread_mutex_unlock(&rd->ctl_lock);
	return ret;
}

static const struct blk_snap_ops ram_snap_ops = {
	.create = ram_snap_create,
	.destroy = ram_snap_destroy,
	.reset = ram_snap_reset,
	.list = ram_snap_list,
	.save = ram_snap_save,
};

/* ---- resize ---- */

/*
 * blk_resize(): the device grows or shrinks. A grow past what the root's
 * slots cover adds levels on top of the device's tree and of every
 * snapshot's (the old root becomes slot 0 of a new one, keeping its
 * reference), so every tree keeps the one height, rd->root_shift. A shrink
 * drops the pages past the new end and zeros the tail of the last one
 * (reads of a later grow see zeros there, as on a fresh device); it is
 * refused while snapshots exist (-EBUSY), whose trees hold data past the
 * new end that a reset would bring back. The tree never loses levels.
 * ctl_lock keeps snapshot calls and saves out; rd->ar->lock exclusive, the
 * I/O (none is in flight: the caller quiesced the device).
 */
static int ram_resize(struct blk_backend *be, uint64_t *size)
{
	struct ram_dev *rd = (struct ram_dev *)be;
	struct ram_arena *ar = rd->ar;
	uint64_t new = *size, pages, old;
	unsigned int shift, levels, nr_roots = 0, need, i, got = 0;
	struct ram_node **fresh = NULL;
	struct ram_snap *snap;
	int ret = 0;

	if (!new || new % rd->geo.lbs)
		return -EINVAL;
	pthread_mutex_lock(&rd->ctl_lock);
	old = rd->geo.size;
	if (new < old && rd->nr_named) {
		ret = -EBUSY;
		goto out_ctl;
	}
	pages = (new + RAM_PAGE_SIZE - 1) >> RAM_PAGE_SHIFT;
	shift = rd->root_shift;
	while (shift + RAM_NODE_SHIFT < 64 && pages > 1ull << (shift + RAM_NODE_SHIFT))
		shift += RAM_NODE_SHIFT;
	levels = (shift - rd->root_shift) / RAM_NODE_SHIFT;
	if (levels) {
		nr_roots = rd->root ? 1 : 0;
		for (snap = rd->snaps; snap; snap = snap->next)
			nr_roots += snap->root != NULL;
	}
	need = levels * nr_roots;
	if (need) {
		fresh = calloc(need, sizeof(*fresh));
		if (!fresh) {
			ret = -ENOMEM;
			goto out_ctl;
		}
	}
	brlock_write_lock(&ar->lock);
	if (new < old && ar->nr_trees > 1) {
		/* A clone's or its origin's: pages past the end may be shared (see the top). */
		ret = -EBUSY;
		goto out_lock;
	}
	pthread_mutex_lock(&ar->alloc_lock);
	for (got = 0; got < need; got++) {
		bool zero;

		fresh[got] = ram_page_take_locked(rd->ar, &zero);
		if (!fresh[got])
			break;
		if (!zero)
			memset(fresh[got], 0, sizeof(*fresh[got]));
	}
	if (got < need) {
		while (got)
			ram_page_free_locked(rd->ar, fresh[--got]);
		pthread_mutex_unlock(&ar->alloc_lock);
		ret = -ENOMEM;
		goto out_lock;
	}
	/* Each root moves down into slot 0 of a new one, once per level added. */
	for (i = 0; i < need; i++) {
		void **rootp = NULL;
		unsigned int r = i / levels, k = 0;

		if (rd->root && r == k++)
			rootp = &rd->root;
		for (snap = rd->snaps; !rootp && snap; snap = snap->next)
			if (snap->root && r == k++)
				rootp = (void **)&snap->root;
		assert(rootp && *rootp);
		fresh[i]->slot[0] = *rootp;
		__atomic_store_n(rootp, (void *)fresh[i], __ATOMIC_RELEASE);
	}
	__atomic_add_fetch(&ar->nr_nodes, need, __ATOMIC_RELAXED);
	rd->root_shift = shift;
	pthread_mutex_unlock(&ar->alloc_lock);
	if (new < old) {
		uint64_t end = (old + RAM_PAGE_SIZE - 1) & ~(uint64_t)RAM_PAGE_MASK;

		/* One tree: nothing is shared, so nothing is copied and this cannot fail. */
		ret = ram_zero_range_locked(rd, new, end - new);
		assert(!ret);
		if (ret)
			goto out_lock;
	}
	rd->geo.size = new;
out_lock:
	brlock_write_unlock(&ar->lock);
out_ctl:
	pthread_mutex_unlock(&rd->ctl_lock);
	free(fresh);
	return ret;
}

/* ---- open: an image to start from ---- */

/* @path relative to the directory of the config file, as the aio backend's path is. */
static int ram_image_path(struct blk_params *p, const char *path, char *out, size_t len)
{
	const char *slash = p->file ? strrchr(p->file, '/') : NULL;
	int n;

	if (!*path)
		return blk_param_error(p, "image", "is empty (allowed: a raw or sparse image file)");
	if (path[0] == '/' || !slash)
		n = snprintf(out, len, "%s", path);
	else
		n = snprintf(out, len, "%.*s/%s", (int)(slash - p->file), p->file, path);
	if (n < 0 || (size_t)n >= len)
		return blk_param_error(p, "image", "%s is too long", path);
	return 0;
}

/*
 * Open the image and find its size. As root, an image anyone else can
 * change is refused (as the aio backend's path, and the config): whoever
 * writes it chooses what root mounts. Checked on the open file.
 */
static int ram_image_open(struct blk_params *p, const char *path, int *fdp, uint64_t *sizep)
{
	struct stat st;
	off_t end;
	int fd, ret;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		blk_param_error(p, "image", "cannot open %s: %s", path, strerror(-ret));
		return ret;
	}
	if (fstat(fd, &st)) {
		ret = -errno;
		blk_param_error(p, "image", "cannot stat %s: %s", path, strerror(-ret));
		goto out_close;
	}
	if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
		ret = blk_param_error(p, "image", "%s is not a regular file or a block device",
				      path);
		goto out_close;
	}
	if (S_ISREG(st.st_mode) && geteuid() == 0 && ((st.st_mode & 022) || st.st_uid != 0)) {
		ret = blk_param_error(p, "image",
			"%s is writable by users other than root (mode %04o, owner uid %u); refused when running as root (chmod go-w, chown root)",
			path, (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid);
		goto out_close;
	}
	end = lseek(fd, 0, SEEK_END);
	if (end < 0) {
		ret = -errno;
		blk_param_error(p, "image", "cannot find the size of %s: %s", path, strerror(-ret));
		goto out_close;
	}
	*fdp = fd;
	*sizep = (uint64_t)end;
	return 0;

out_close:
	close(fd);
	return ret;
}

/* Read [@pos, @pos + @len) of the image; bytes past its end read as zeros. */
static int read_full(int fd, unsigned char *buf, uint64_t pos, size_t len)
{
	size_t done = 0;

	while (done < len) {
		ssize_t r = pread(fd, buf + done, len - done, (off_t)(pos + done));

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			break;
		done += (size_t)r;
	}
	memset(buf + done, 0, len - done);
	return 0;
}

/* Write [@pos, @pos + @len) of @buf into the (new, private) device. */
static int ram_load_run(struct ram_dev *rd, uint64_t pos, unsigned char *buf, uint64_t len)
{
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	struct blk_io io = { .op = BLK_WRITE, .pos = pos, .len = len, .iov = &iov, .iovcnt = 1 };

	return ram_write(rd, &io);
}

/*
 * Load the image: its data extents (SEEK_DATA/SEEK_HOLE; the whole file
 * where the file system cannot say), a chunk at a time, and of them only
 * the pages that hold a byte that is not zero: a sparse image costs its
 * data, and so does a raw one with zeros written out.
 */
static int ram_load_image(struct ram_dev *rd, struct blk_params *p, const char *path, int fd,
			  uint64_t isize)
{
	unsigned char *buf;
	uint64_t off = 0;
	int ret = 0;

	buf = aligned_alloc(RAM_PAGE_SIZE, RAM_IO_CHUNK);
	if (!buf)
		return blk_param_error(p, "image", "cannot load %s: out of memory", path);
	while (off < isize && !ret) {
		off_t d = lseek(fd, (off_t)off, SEEK_DATA), h;
		uint64_t data, hole, pos;

		if (d < 0 && errno == ENXIO)
			break;			/* nothing but a hole to the end */
		data = d < 0 ? off : (uint64_t)d;
		h = d < 0 ? -1 : lseek(fd, d, SEEK_HOLE);
		hole = h < 0 ? isize : min_u64((uint64_t)h, isize);
		for (pos = data & ~(uint64_t)RAM_PAGE_MASK; pos < hole && !ret;) {
			size_t n = (size_t)min_u64(RAM_IO_CHUNK, ((hole + RAM_PAGE_MASK) & ~(uint64_t)RAM_PAGE_MASK) - pos);
			size_t i, run = 0;

			ret = read_full(fd, buf, pos, n);
			if (ret) {
				blk_param_error(p, "image", "cannot read %s: %s", path, strerror(-ret));
				break;
			}
			/* Runs of pages that are not all zeros. */
			for (i = 0; i <= n && !ret; i += RAM_PAGE_SIZE) {
				if (i < n && !page_is_zero(buf + i, RAM_PAGE_SIZE))
					continue;
				if (i > run)
					ret = ram_load_run(rd, pos + run, buf + run, i - run);
				run = i + RAM_PAGE_SIZE;
			}
			if (ret)
				blk_param_error(p, "image", "cannot load %s: %s after %llu bytes",
						path, strerror(-ret), (unsigned long long)pos);
			pos += n;
		}
		off = hole;
	}
	free(buf);
	return ret;
}

/* ---- open, close, geometry, stat ---- */

/*
 * Every ram device open in the process, by name, so that `clone =
 * DEV@SNAP` finds its origin. registry_lock is outermost: registry_lock
 * -> the origin's ctl_lock -> ar->lock -> ar->alloc_lock (a clone's open
 * takes them in this order; nothing takes registry_lock under another).
 */
static pthread_mutex_t ram_registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ram_dev *ram_registry;	/* registry_lock: newest first */

static void ram_registry_add(struct ram_dev *rd)
{
	pthread_mutex_lock(&ram_registry_lock);
	rd->reg_next = ram_registry;
	ram_registry = rd;
	pthread_mutex_unlock(&ram_registry_lock);
}

static void ram_registry_del(struct ram_dev *rd)
{
	struct ram_dev **pp;

	pthread_mutex_lock(&ram_registry_lock);
	for (pp = &ram_registry; *pp; pp = &(*pp)->reg_next)
		if (*pp == rd) {
			*pp = rd->reg_next;
			break;
		}
	pthread_mutex_unlock(&ram_registry_lock);
}

static void ram_arena_free(struct ram_arena *ar)
{
	if (ar->have_thread) {
		pthread_mutex_lock(&ar->alloc_lock);
		ar->stopping = true;
		pthread_cond_signal(&ar->thread_cv);
		pthread_mutex_unlock(&ar->alloc_lock);
		pthread_join(ar->thread, NULL);
	}
	/* Nodes and pages all live in slabs: unmapping them frees the trees. */
	while (ar->slabs) {
		struct ram_slab *s = ar->slabs;

		ram_slab_unlink_locked(ar, s);
		munmap(s, RAM_SLAB_SIZE);
	}
	while (ar->spare) {
		struct ram_slab *s = ar->spare;

		ar->spare = s->next;
		munmap(s, RAM_SLAB_SIZE);
	}
	while (ar->release) {
		struct ram_slab *s = ar->release;

		ar->release = s->next;
		munmap(s, RAM_SLAB_SIZE);
	}
	pthread_cond_destroy(&ar->thread_cv);
	pthread_mutex_destroy(&ar->alloc_lock);
	brlock_destroy(&ar->lock);
	free(ar);
}

/*
 * A device leaves its arena. The last one frees the arena whole (its trees
 * go with the slabs); any other drops its own trees, the device's and its
 * snapshots', under ar->lock exclusive, so that what a clone or an origin
 * still shares stays and only what this device alone held is freed.
 */
static void ram_free(struct ram_dev *rd)
{
	struct ram_arena *ar = rd->ar;
	struct ram_snap *snap;
	bool last = true;

	if (ar) {
		/* No clone can find it from here on (one that found it has joined). */
		ram_registry_del(rd);
		brlock_write_lock(&ar->lock);
		assert(ar->nr_devs >= 1 && ar->nr_trees >= 1 + rd->nr_snaps);
		last = --ar->nr_devs == 0;
		if (!last) {
			pthread_mutex_lock(&ar->alloc_lock);
			if (rd->root)
				ram_tree_put_locked(rd, rd->root, rd->root_shift);
			for (snap = rd->snaps; snap; snap = snap->next)
				if (snap->root)
					ram_tree_put_locked(rd, snap->root, rd->root_shift);
			pthread_mutex_unlock(&ar->alloc_lock);
			ar->nr_trees -= 1 + rd->nr_snaps;
		}
		brlock_write_unlock(&ar->lock);
		if (last)
			ram_arena_free(ar);
	}
	while ((snap = rd->snaps)) {
		rd->snaps = snap->next;
		free(snap);
	}
	pthread_mutex_destroy(&rd->ctl_lock);
	free(rd);
}

/* An arena with nothing in it, its locks and its thread; ERR_PTR with p->err. */
static struct ram_arena *ram_arena_new(struct blk_params *p, uint64_t reserve)
{
	pthread_attr_t ta;
	struct ram_arena *ar;
	int ret;

	/* Aligned: the lock's writer flag has a cache line of its own. */
	ar = aligned_alloc(_Alignof(struct ram_arena), sizeof(*ar));
	if (ar)
		memset(ar, 0, sizeof(*ar));
	if (!ar) {
		blk_param_error(p, NULL, "cannot set up the ram backend: out of memory");
		return ERR_PTR(-ENOMEM);
	}
	ar->reserve = (unsigned int)((reserve + RAM_SLAB_SIZE - 1) / RAM_SLAB_SIZE);
	ar->nr_devs = 1;
	ar->nr_trees = 1;
	ret = brlock_init(&ar->lock);
	if (ret) {
		free(ar);
		blk_param_error(p, NULL, "cannot set up the ram backend: %s", strerror(-ret));
		return ERR_PTR(ret);
	}
	pthread_mutex_init(&ar->alloc_lock, NULL);
	ret = -blk_cond_init(&ar->thread_cv);	/* waited on with a timeout */
	if (ret) {
		pthread_mutex_destroy(&ar->alloc_lock);
		brlock_destroy(&ar->lock);
		free(ar);
		blk_param_error(p, NULL, "cannot set up the ram backend: %s", strerror(-ret));
		return ERR_PTR(ret);
	}

	/* It sleeps until there is a reserve to fill or a slab to unmap. */
	pthread_attr_init(&ta);
	pthread_attr_setstacksize(&ta, 64 << 10);
	ret = -pthread_create(&ar->thread, &ta, ram_thread_fn, ar);
	pthread_attr_destroy(&ta);
	if (ret) {
		ram_arena_free(ar);
		blk_param_error(p, NULL, "cannot start the ram backend's thread: %s", strerror(-ret));
		return ERR_PTR(ret);
	}
	ar->have_thread = true;
	pthread_setname_np(ar->thread, "blkfs-ram");
	return ar;
}

/* A device with nothing written and no arena yet; NULL with p->err. */
static struct ram_dev *ram_dev_alloc(struct blk_params *p, const struct blk_geometry *geo)
{
	struct ram_dev *rd = calloc(1, sizeof(*rd));
	uint64_t dev_pages;

	if (!rd) {
		blk_param_error(p, NULL, "cannot set up the ram backend: out of memory");
		return NULL;
	}
	rd->geo = *geo;
	snprintf(rd->dev, sizeof(rd->dev), "%s", p->dev ? p->dev : "?");
	/* Levels so that the root's slots cover every page index (ram_resize() adds more). */
	dev_pages = (rd->geo.size + RAM_PAGE_SIZE - 1) >> RAM_PAGE_SHIFT;
	while (dev_pages > 1ull << (rd->root_shift + RAM_NODE_SHIFT))
		rd->root_shift += RAM_NODE_SHIFT;
	pthread_mutex_init(&rd->ctl_lock, NULL);
	rd->be.ops = &ram_backend_ops;
	return rd;
}

/* A device with nothing written, in an arena of its own; ERR_PTR with p->err. */
static struct ram_dev *ram_dev_new(struct blk_params *p, const struct blk_geometry *geo,
				   uint64_t reserve)
{
	struct ram_dev *rd = ram_dev_alloc(p, geo);
	struct ram_arena *ar;

	if (!rd)
		return ERR_PTR(-ENOMEM);
	ar = ram_arena_new(p, reserve);
	if (IS_ERR(ar)) {
		ram_free(rd);
		return (struct ram_dev *)ar;
	}
	ar->first = &rd->be;
	rd->ar = ar;
	return rd;
}

/*
 * clone = DEV@SNAP: a device whose contents start as snapshot SNAP of the
 * ram device DEV (open in this process), sharing its pages: the clone's
 * tree is a reference to the snapshot's root in DEV's arena, which the
 * clone joins. Nothing is copied; a write to either copies what it
 * touches (ram_write()). Geometry the config leaves out is DEV's; the
 * size must be DEV's (one tree height; resize the clone after).
 */
static struct blk_backend *ram_clone_open(struct blk_params *p, const char *spec)
{
	char devname[sizeof(((struct ram_dev *)0)->dev)];
	const char *at = strchr(spec, '@');
	struct ram_dev *origin, *rd = NULL;
	struct blk_params q = *p;
	struct blk_geometry geo;
	struct ram_snap *snap;
	int ret;

	if (blk_param_get(p, "image"))
		return ERR_PTR(blk_param_error(p, "clone", "cannot go with image (a clone's "
					       "contents are its origin's snapshot)"));
	if (blk_param_get(p, "reserve"))
		return ERR_PTR(blk_param_error(p, "clone", "cannot go with reserve (a clone "
					       "uses its origin's memory and reserve)"));
	if (!at || at == spec || !at[1] || (size_t)(at - spec) >= sizeof(devname))
		return ERR_PTR(blk_param_error(p, "clone", "'%s' is not DEV@SNAP (a ram device "
					       "of this mount and one of its snapshots)", spec));
	snprintf(devname, sizeof(devname), "%.*s", (int)(at - spec), spec);
	if (!blk_snap_name_valid(at + 1))
		return ERR_PTR(blk_param_error(p, "clone", "'%s' is not a snapshot name", at + 1));

	pthread_mutex_lock(&ram_registry_lock);
	for (origin = ram_registry; origin; origin = origin->reg_next)
		if (!strcmp(origin->dev, devname))
			break;
	if (!origin) {
		ret = blk_param_error(p, "clone", "no ram device named %s (allowed: DEV@SNAP, DEV a "
				      "ram device of this mount)", devname);
		goto out_registry;
	}
	/* ctl_lock: the snapshot stays, and so do the origin's size and height */
	pthread_mutex_lock(&origin->ctl_lock);
	snap = snap_find_locked(origin, at + 1, NULL);
	if (!snap) {
		ret = blk_param_error(p, "clone", "%s has no snapshot named %s", devname, at + 1);
		goto out_ctl;
	}
	if (q.geo.size && q.geo.size != origin->geo.size) {
		ret = blk_param_error(p, "size", "%llu is not the size of %s (%llu): a clone has "
				      "its origin's size (leave size out; resize the clone after)",
				      (unsigned long long)q.geo.size, devname,
				      (unsigned long long)origin->geo.size);
		goto out_ctl;
	}
	if (!q.geo.size) {
		/* without a size nothing was given (conf): all of it is the origin's */
		q.geo = origin->geo;
		q.geo.dma_align = 0;
	}
	ret = be_geo_from_params(&q, "ram", &geo);
	if (ret)
		goto out_ctl;
	rd = ram_dev_alloc(p, &geo);
	if (!rd) {
		ret = -ENOMEM;
		goto out_ctl;
	}
	assert(rd->root_shift == origin->root_shift);
	snprintf(rd->clone_of, sizeof(rd->clone_of), "%s", spec);
	rd->ar = origin->ar;
	brlock_write_lock(&rd->ar->lock);
	if (snap->root)
		ref_get(snap->root);
	rd->root = snap->root;
	rd->ar->nr_trees++;
	rd->ar->nr_devs++;
	brlock_write_unlock(&rd->ar->lock);
	rd->reg_next = ram_registry;
	ram_registry = rd;
	ret = 0;
out_ctl:
	pthread_mutex_unlock(&origin->ctl_lock);
out_registry:
	pthread_mutex_unlock(&ram_registry_lock);
	return ret ? ERR_PTR(ret) : &rd->be;
}

/*
 * The config's keys. clone is read first, alone (ram_open()): a clone
 * refuses image and reserve whatever their values say.
 */
struct ram_conf {
	const char *image, *clone;
	uint64_t reserve;
};

#define RAM_KNOBS(K)												\
	K(image,   text,     image,   0, 0, 0, "a raw or sparse image file",				\
	  "an image file to start from (relative to the config's directory)")				\
	K(reserve, size_max, reserve, 0, RAM_RESERVE_MAX, RAM_RESERVE_DEF,				\
	  "0 to turn it off, up to 1G; rounded up to 2M",						\
	  "memory kept mapped and touched ahead of writes")						\
	K(clone,   text,     clone,   0, 0, 0, "DEV@SNAP",						\
	  "start as snapshot SNAP of ram device DEV, sharing its memory")

BK_BACKEND_DEFINE(ram, struct ram_conf, RAM_KNOBS);

static struct blk_backend *ram_open(struct blk_params *p, struct blk_backend *next)
{
	char path[PATH_MAX];
	struct blk_geometry geo;
	struct ram_conf conf;
	struct ram_dev *rd;
	const char *image;
	uint64_t reserve, isize = 0;
	int ret, fd = -1;

	(void)next;
	ret = bk_parse_key(&bk_table, p, "clone", &conf);
	if (ret)
		return ERR_PTR(ret);
	if (conf.clone)
		return ram_clone_open(p, conf.clone);
	ret = bk_parse(&bk_table, p, &conf);
	if (ret)
		return ERR_PTR(ret);
	reserve = conf.reserve;
	image = conf.image;
	if (image) {
		ret = ram_image_path(p, image, path, sizeof(path));
		if (ret)
			return ERR_PTR(ret);
		ret = ram_image_open(p, path, &fd, &isize);
		if (ret)
			return ERR_PTR(ret);
	}

	if (image && !p->geo.size) {
		/* No size: the image's, rounded up to the logical block size. */
		struct blk_geometry cfg = p->geo;
		uint64_t lbs = cfg.lbs ? cfg.lbs : 512;

		if (!isize) {
			ret = blk_param_error(p, "image",
				"%s is empty, and the device has no size (allowed: an image of at least one byte, or a size)",
				path);
			goto out_close;
		}
		p->geo.size = (isize + lbs - 1) / lbs * lbs;
		ret = be_geo_from_params(p, "ram", &geo);
		p->geo = cfg;
	} else {
		ret = be_geo_from_params(p, "ram", &geo);
	}
	if (ret)
		goto out_close;
	if (image && isize > geo.size) {
		ret = blk_param_error(p, "image",
			"%s holds %llu bytes, more than the device's size %llu (allowed: an image no larger than size; the rest of the device reads as zeros; without size the device takes the image's size)",
			path, (unsigned long long)isize, (unsigned long long)geo.size);
		goto out_close;
	}

	rd = ram_dev_new(p, &geo, reserve);
	if (IS_ERR(rd)) {
		ret = (int)PTR_ERR(rd);
		goto out_close;
	}
	if (image) {
		ret = ram_load_image(rd, p, path, fd, isize);
		close(fd);
		if (ret) {
			ram_free(rd);
			return ERR_PTR(ret);
		}
	}
	ram_registry_add(rd);
	return &rd->be;

out_close:
	if (fd >= 0)
		close(fd);
	return ERR_PTR(ret);
}

static void ram_close(struct blk_backend *be)
{
	ram_free((struct ram_dev *)be);
}

static void ram_geometry(struct blk_backend *be, struct blk_geometry *geo)
{
	*geo = ((struct ram_dev *)be)->geo;
}

static size_t ram_stat(struct blk_backend *be, char *buf, size_t len)
{
	struct ram_dev *rd = (struct ram_dev *)be;
	unsigned long long pages = __atomic_load_n(&rd->ar->nr_pages, __ATOMIC_RELAXED);
	unsigned long long nodes = __atomic_load_n(&rd->ar->nr_nodes, __ATOMIC_RELAXED);
	unsigned long long slabs = __atomic_load_n(&rd->ar->nr_slabs, __ATOMIC_RELAXED);
	unsigned long long spare = __atomic_load_n(&rd->ar->nr_spare_stat, __ATOMIC_RELAXED);

	/*
	 * arena_bytes: data pages held, by the device and its snapshots (each
	 * page once); node_bytes: the index; slab_bytes: what is mapped to
	 * hold them, the reserve (slab_spare_bytes) included. A clone and its
	 * origin share one arena (arena_devices of them): these are its
	 * totals, the same on each.
	 */
	return be_stat_printf(buf, len,
			      "arena_bytes %llu\narena_pages %llu\nslab_bytes %llu\n"
			      "slab_spare_bytes %llu\nnode_bytes %llu\narena_nodes %llu\n"
			      "snapshot_cow_pages %llu\nsnapshot_cow_nodes %llu\n"
			      "reserve_misses %llu\narena_devices %u\n",
			      pages << RAM_PAGE_SHIFT, pages, slabs * RAM_SLAB_SIZE,
			      spare * RAM_SLAB_SIZE, nodes << RAM_PAGE_SHIFT, nodes,
			      (unsigned long long)__atomic_load_n(&rd->nr_cow_pages, __ATOMIC_RELAXED),
			      (unsigned long long)__atomic_load_n(&rd->nr_cow_nodes, __ATOMIC_RELAXED),
			      (unsigned long long)__atomic_load_n(&rd->ar->nr_reserve_misses, __ATOMIC_RELAXED),
			      __atomic_load_n(&rd->ar->nr_devs, __ATOMIC_RELAXED));
}

const struct blk_backend_ops ram_backend_ops = {
	.name = "ram",
	.keys = ram_keys,
	.help = "ram: sparse RAM disk (memory only for data written), instant snapshots; "
		"geometry from the config; image = FILE to start from, reserve = 8M",
	.open = ram_open,
	.close = ram_close,
	.geometry = ram_geometry,
	.submit = ram_submit,
	.stat = ram_stat,
	.snap = &ram_snap_ops,
	.resize = ram_resize,
};
