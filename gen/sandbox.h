/* sandbox.h: a Lua 5.4 state for evaluating specs as data: a byte-capped allocator, an
 * instruction limit, only base/string/table/math/utf8, text chunks only, strict globals, and one
 * protected-call wrapper whose errors read "file:line: message". Used only by gen/spec.c. */
#ifndef BOOST_SANDBOX_H
#define BOOST_SANDBOX_H

#include <stddef.h>
#include <lua.h>

#define SANDBOX_MEM_CAP (64u << 20)        /* bytes a spec may allocate */
#define SANDBOX_INSTR_LIMIT 50000000L      /* Lua VM instructions a spec may run */

typedef struct Sandbox Sandbox;

/* A fresh state with the allowed libraries, print going to stderr, and strict globals: a spec
 * may read only the libraries and what the host adds with sandbox_define, and may write no
 * global at all. Returns NULL when memory runs out. */
Sandbox *sandbox_new(size_t mem_cap, long instr_limit);
lua_State *sandbox_lua(Sandbox *sb);

/* Define a global (the value on top of the stack is popped); only the host may do this. */
void sandbox_define(Sandbox *sb, const char *name);

/* Compile text (never bytecode) as a chunk named after path and push it. 0, or 2 with err set. */
int sandbox_load(Sandbox *sb, const char *path, const char *text, size_t len, char *err, size_t errlen);

/* Call the function below nargs arguments on the stack, protected. On error the stack is
 * restored and err holds "file:line: message" (out of memory and too many instructions included).
 * Returns 0 or 2. */
int sandbox_pcall(Sandbox *sb, int nargs, int nresults, char *err, size_t errlen);

/* The "file:line" of the innermost Lua code running at stack level `level` or above, into buf
 * (empty when no Lua code is running). */
void sandbox_where(lua_State *L, int level, char *buf, size_t len);

/* Edit distance of two short names (99 when either is over 40 characters): "did you mean" hints. */
int name_distance(const char *a, const char *b);

size_t sandbox_bytes_used(Sandbox *sb);
long sandbox_instructions(Sandbox *sb);
void sandbox_close(Sandbox *sb);

#endif
