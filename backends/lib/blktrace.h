/* SPDX-License-Identifier: MIT */
/*
 * backends/lib/blktrace.h - the on-disk format of blktrace (struct blk_io_trace,
 * version 7), as blkparse, btt, iowatcher and fio's --read_iolog read it:
 * one 48-byte record in the writer's native byte order, followed by
 * pdu_len bytes of payload. Written from the layout the kernel's
 * include/uapi/linux/blktrace_api.h documents; tests/unit/test_trace.c
 * checks every offset.
 *
 * An action is a category mask in the high 16 bits (BLK_TC_*) and an
 * action code in the low 16 (BLK_TA_*): BLK_TC_ACT(BLK_TC_WRITE) |
 * BT_ACT_QUEUE is "Q W". blkparse prints the category bits as RWBS
 * (R read, W write, F flush, D discard, S sync, A readahead).
 */
#ifndef BLKFS_BLKTRACE_H
#define BLKFS_BLKTRACE_H

#include <stdint.h>

#define BT_MAGIC	0x65617400u	/* "eat\0", low byte is the version */
#define BT_VERSION	0x07u

struct blk_io_trace {
	uint32_t magic;		/* BT_MAGIC | BT_VERSION */
	uint32_t sequence;	/* per cpu: blkparse counts the gaps */
	uint64_t time;		/* ns since the trace began */
	uint64_t sector;	/* 512-byte sectors */
	uint32_t bytes;
	uint32_t action;	/* BLK_TC_ACT(categories) | action */
	uint32_t pid;
	uint32_t device;	/* major << 20 | minor */
	uint32_t cpu;
	uint16_t error;		/* positive errno, at completion */
	uint16_t pdu_len;	/* payload bytes that follow */
};

/* categories (the high 16 bits of action) */
enum {
	BT_TC_READ	= 1 << 0,
	BT_TC_WRITE	= 1 << 1,
	BT_TC_FLUSH	= 1 << 2,
	BT_TC_SYNC	= 1 << 3,
	BT_TC_QUEUE	= 1 << 4,
	BT_TC_REQUEUE	= 1 << 5,
	BT_TC_ISSUE	= 1 << 6,
	BT_TC_COMPLETE	= 1 << 7,
	BT_TC_FS	= 1 << 8,
	BT_TC_PC	= 1 << 9,
	BT_TC_NOTIFY	= 1 << 10,
	BT_TC_AHEAD	= 1 << 11,
	BT_TC_META	= 1 << 12,
	BT_TC_DISCARD	= 1 << 13,
	BT_TC_DRV_DATA	= 1 << 14,
	BT_TC_FUA	= 1 << 15,
};

#define BT_TC_SHIFT	16
#define BT_TC_ACT(c)	((uint32_t)(c) << BT_TC_SHIFT)

/* action codes (the low 16 bits) */
enum {
	BT_TA_QUEUE = 1,	/* Q: submitted to the layer below */
	BT_TA_BACKMERGE,	/* M: appended to an I/O being built */
	BT_TA_FRONTMERGE,	/* F */
	BT_TA_GETRQ,		/* G */
	BT_TA_SLEEPRQ,		/* S */
	BT_TA_REQUEUE,		/* R */
	BT_TA_ISSUE,		/* D: left the last queue, to the device */
	BT_TA_COMPLETE,		/* C: completed, with its error */
	BT_TA_PLUG,		/* P */
	BT_TA_UNPLUG_IO,	/* U */
	BT_TA_UNPLUG_TIMER,	/* UT */
	BT_TA_INSERT,		/* I: put in a queue */
	BT_TA_SPLIT,		/* X: split; the payload is the split point (be64 sector) */
	BT_TA_BOUNCE,		/* B */
	BT_TA_REMAP,		/* A */
	BT_TA_ABORT,
	BT_TA_DRV_DATA,
};

/* notes: category NOTIFY, payload a text (BT_TN_MESSAGE prints as "m N text") */
enum {
	BT_TN_PROCESS = 0,
	BT_TN_TIMESTAMP,
	BT_TN_MESSAGE,
};

#define BT_ACT(cat, act)	(BT_TC_ACT(cat) | (uint32_t)(act))
#define BT_ACT_QUEUE		BT_ACT(BT_TC_QUEUE, BT_TA_QUEUE)
#define BT_ACT_BACKMERGE	BT_ACT(BT_TC_QUEUE, BT_TA_BACKMERGE)
#define BT_ACT_INSERT		BT_ACT(BT_TC_QUEUE, BT_TA_INSERT)
#define BT_ACT_SPLIT		BT_ACT(0, BT_TA_SPLIT)
#define BT_ACT_ISSUE		BT_ACT(BT_TC_ISSUE, BT_TA_ISSUE)
#define BT_ACT_COMPLETE		BT_ACT(BT_TC_COMPLETE, BT_TA_COMPLETE)
#define BT_ACT_MESSAGE		BT_ACT(BT_TC_NOTIFY, BT_TN_MESSAGE)

/* blkparse's device numbers: MAJOR(d) = d >> 20, MINOR(d) = d & 0xfffff */
#define BT_MINORBITS		20
#define BT_MKDEV(ma, mi)	(((uint32_t)(ma) << BT_MINORBITS) | (uint32_t)(mi))

#endif
