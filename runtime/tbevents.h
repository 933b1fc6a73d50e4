/* tbevents.h: TensorBoard event files written in C for `boost train --tensorboard DIR`: TFRecord
 * framing (length, masked CRC-32C of the length, the bytes, masked CRC-32C of the bytes) around
 * hand-encoded protobuf Event messages holding Summary scalars (tag, simple_value). */
#ifndef BOOST_TBEVENTS_H
#define BOOST_TBEVENTS_H

#include <stddef.h>
#include <stdint.h>

typedef struct TbEvents TbEvents;

/* Create DIR (and its parents) and a new events.out.tfevents.TIME.HOST.PID file in it, starting
 * with the file-version event. Returns NULL with "DIR: why" in err. */
TbEvents *tb_open(const char *dir, char *err, size_t errlen);
/* One scalar event (wall time now). Returns 0, or 1 when the write failed. */
int tb_scalar(TbEvents *t, int64_t step, const char *tag, double value);
/* The scalars of a JSON object's fields "{"key": number | [numbers | [numbers]] ...}" (the extra
 * fields of the training log, e.g. MoE expert loads): tags key, key/i, key/i/j. */
int tb_json_scalars(TbEvents *t, int64_t step, const char *json, size_t len);
void tb_flush(TbEvents *t);
void tb_close(TbEvents *t);
const char *tb_path(const TbEvents *t);

/* The masked CRC-32C of TFRecord framing (for the tests). */
uint32_t tb_masked_crc(const void *buf, size_t len);

#endif
