/* crc32c.h: CRC-32C (Castagnoli polynomial 0x1EDC6F41, reflected, init and final xor 0xFFFFFFFF),
 * the checksum checkpoints record per file in state.json. SSE4.2's crc32 instruction when the CPU
 * has it, else a slice-by-8 table; both give the same value ("123456789" -> 0xE3069283). */
#ifndef BOOST_CRC32C_H
#define BOOST_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continue a CRC over buf[0..len): start with crc = 0, feed the pieces in order; the value after
 * the last piece is the CRC of their concatenation. */
uint32_t crc32c_update(uint32_t crc, const void *buf, size_t len);

/* The same with the table only (for tests that compare both paths). */
uint32_t crc32c_update_table(uint32_t crc, const void *buf, size_t len);

/* The CRC-32C of a regular file's bytes. 0, or -1 with errno set (EISDIR for a folder, EINVAL
 * for another kind of file, EIO for a read error). */
int crc32c_file(const char *path, uint32_t *crc);

/* 1 when crc32c_update uses the crc32 instruction. */
int crc32c_hardware(void);

#endif
