/* SPDX-License-Identifier: MIT */
/*
 * fuse/opens.h - the OPEN requests in flight, remembered by their unique id
 * from receipt (/dev/fuse or the ring) until their reply passes, so that
 * the reply can carry FOPEN_PARALLEL_DIRECT_WRITES, which libfuse 3.14
 * cannot set (rawio.c). Without it the kernel serialises direct writes to
 * one file (fio with several jobs).
 *
 * The table grows with the OPENs in flight (it starts at 64): none is
 * forgotten while its reply is pending. Only when it cannot grow (no
 * memory) is the oldest entry overwritten, and that open's reply goes out
 * without the flag: counted (bf_opens_lost(), .sys/.transport's
 * open_flags_lost).
 *
 * Pure: no libfuse (tests/unit/test_slots.c links it alone). Lock: its own,
 * a leaf.
 */
#ifndef BLKFS_FUSE_OPENS_H
#define BLKFS_FUSE_OPENS_H

#include <stdbool.h>
#include <stdint.h>

/* A request was received: remembered when @opcode is FUSE_OPEN. */
void bf_opens_note(uint32_t opcode, uint64_t unique);
/* The reply to @unique passes: true (and forgotten) when it was a remembered OPEN's. */
bool bf_opens_forget(uint64_t unique);
/* OPENs remembered now (a reply with an error forgets its own: bf_opens_forget). */
uint64_t bf_opens_pending(void);
/* OPEN replies that went out without the flag: the table could not grow. */
uint64_t bf_opens_lost(void);
/* At exit: the table's memory goes. */
void bf_opens_free(void);

#endif
