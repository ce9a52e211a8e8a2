// SPDX-License-Identifier: MIT
/*
 * backends/lib/names.c - the contract's names (backend.h): an op's name
 * for messages and traces, and which snapshot names are valid. Every layer
 * calls them (fuse/live.c checks a snapshot name before it asks).
 */
#include "../backend.h"

const char *blk_op_name(enum blk_op op)
{
	switch (op) {
	case BLK_READ: return "READ";
	case BLK_WRITE: return "WRITE";
	case BLK_FLUSH: return "FLUSH";
	case BLK_DISCARD: return "DISCARD";
	case BLK_WRITE_ZEROES: return "WRITE_ZEROES";
	}
	return "UNKNOWN";
}

bool blk_snap_name_valid(const char *name)
{
	size_t i;

	if (!name || !name[0] || name[0] == '.' || name[0] == '-')
		return false;
	for (i = 0; name[i]; i++) {
		char c = name[i];

		if (i == BLK_SNAP_NAME_MAX)
			return false;
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-' || c == '+' || c == '@' || c == ':'))
			return false;
	}
	return true;
}
