/* sandbox.c: the Lua state specs run in (see sandbox.h). A spec is data with a little code, so it
 * gets no files, no processes, no bytecode, a memory cap and an instruction budget, and every
 * mistake comes back as "file:line: message" instead of a crash. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <lua.h>       // defines: lua_State, lua_newstate, lua_pcall, lua_sethook, lua_getstack
#include <lauxlib.h>   // defines: luaL_loadbufferx, luaL_requiref, luaL_tolstring, luaL_error
#include <lualib.h>    // defines: luaopen_base, luaopen_string, luaopen_table, luaopen_math, luaopen_utf8
#include "gen/sandbox.h"

#define HOOK_EVERY 1000   /* instructions between two calls of the budget hook */

struct Sandbox {
    lua_State *L;
    size_t used, cap;        /* bytes held by Lua now, and the most it may hold */
    long instructions, limit;
    int out_of_memory;       /* the allocator refused a request during the current call */
    char oom_where[700];     /* "file:line" of the Lua code that asked for it */
    char defined[400];       /* host-defined globals, for messages: "model, run, ..." */
    char chunks[16][600];    /* paths of the chunks loaded, to undo Lua's 60-character cut */
    int nchunks;
};

/* Names a spec might reach for that are deliberately absent. */
static const char *const UNAVAILABLE[] = {
    "os", "io", "require", "load", "dofile", "loadfile", "package", "debug", "loadstring",
    "xpcall", "coroutine", NULL,
};

void sandbox_where(lua_State *L, int level, char *buf, size_t len) {
    lua_Debug ar;
    buf[0] = 0;
    for (; lua_getstack(L, level, &ar); level++) {
        if (!lua_getinfo(L, "Sl", &ar)) break;
        if (ar.currentline > 0) {
            const char *src = ar.source && ar.source[0] == '@' ? ar.source + 1 : ar.short_src;
            snprintf(buf, len, "%s:%d", src, ar.currentline);
            return;
        }
    }
}

/* Lua shortens long chunk names to "...tail:LINE: msg"; put the full path back when the tail
 * belongs to a chunk this sandbox loaded. Returns msg or buf. */
static const char *full_path_message(Sandbox *sb, const char *msg, char *buf, size_t n) {
    if (strncmp(msg, "...", 3) != 0) return msg;
    const char *colon = NULL;
    for (const char *p = msg + 3; *p && *p != '\n'; p++) {
        if (*p != ':') continue;
        const char *q = p + 1;
        while (*q >= '0' && *q <= '9') q++;
        if (q > p + 1 && *q == ':') { colon = p; break; }
    }
    if (!colon) return msg;
    size_t tail = colon - (msg + 3);
    for (int i = 0; i < sb->nchunks; i++) {
        size_t len = strlen(sb->chunks[i]);
        if (len >= tail && strncmp(sb->chunks[i] + len - tail, msg + 3, tail) == 0) {
            snprintf(buf, n, "%s%s", sb->chunks[i], colon);
            return buf;
        }
    }
    return msg;
}

/* Counting allocator with a cap. On refusal it notes where the spec was, because Lua raises
 * out-of-memory without calling the message handler. */
static void *sb_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    Sandbox *sb = ud;
    size_t old = ptr ? osize : 0;
    if (nsize == 0) {
        free(ptr);
        sb->used -= old;
        return NULL;
    }
    if (nsize > old && sb->used - old + nsize > sb->cap) {
        if (!sb->out_of_memory && sb->L) sandbox_where(sb->L, 0, sb->oom_where, sizeof sb->oom_where);
        sb->out_of_memory = 1;
        return NULL;
    }
    void *p = realloc(ptr, nsize);
    if (!p) { sb->out_of_memory = 1; return NULL; }
    sb->used = sb->used - old + nsize;
    return p;
}

static Sandbox *sandbox_of(lua_State *L) {
    void *ud;
    lua_getallocf(L, &ud);
    return ud;
}

static void sb_hook(lua_State *L, lua_Debug *ar) {
    Sandbox *sb = sandbox_of(L);
    sb->instructions += HOOK_EVERY;
    if (sb->instructions > sb->limit) {
        char where[700];
        sandbox_where(L, 0, where, sizeof where);
        lua_pushfstring(L, "%s%sspec runs too long (more than %d instructions; infinite loop?)",
                        where, where[0] ? ": " : "", (int)sb->limit);
        lua_error(L);
    }
}

/* True when msg already starts with "something:LINE:". */
static int has_location(const char *msg) {
    for (const char *p = msg; *p && *p != '\n'; p++) {
        if (*p != ':') continue;
        const char *q = p + 1;
        while (*q >= '0' && *q <= '9') q++;
        if (q > p + 1 && *q == ':') return 1;
    }
    return 0;
}

/* Message handler: turns any error value into "file:line: message". */
static int sb_message_handler(lua_State *L) {
    const char *msg = lua_tostring(L, 1);
    if (!msg) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) msg = lua_tostring(L, -1);
        else msg = lua_pushfstring(L, "error() was given a %s value instead of a message", luaL_typename(L, 1));
    }
    if (!has_location(msg)) {
        char where[700];
        sandbox_where(L, 1, where, sizeof where);
        if (where[0]) msg = lua_pushfstring(L, "%s: %s", where, msg);
    }
    char full[2000];
    lua_pushstring(L, full_path_message(sandbox_of(L), msg, full, sizeof full));
    return 1;
}

/* pcall for specs: like the standard one, except that the memory cap and the instruction budget
 * cannot be caught (otherwise `while true do pcall(f) end` would run forever). */
static int sb_pcall(lua_State *L) {
    Sandbox *sb = sandbox_of(L);
    luaL_checkany(L, 1);
    int rc = lua_pcall(L, lua_gettop(L) - 1, LUA_MULTRET, 0);
    if (rc != LUA_OK && (sb->out_of_memory || sb->instructions > sb->limit)) return lua_error(L);
    lua_pushboolean(L, rc == LUA_OK);
    lua_insert(L, 1);
    return lua_gettop(L);
}

/* setmetatable without finalizers: Lua runs __gc with hooks off, so a looping finalizer would
 * escape the instruction limit. */
static int sb_setmetatable(lua_State *L) {
    int t = lua_type(L, 2);
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_argexpected(L, t == LUA_TNIL || t == LUA_TTABLE, 2, "nil or table");
    if (t == LUA_TTABLE) {
        lua_pushstring(L, "__gc");
        if (lua_rawget(L, 2) != LUA_TNIL)
            return luaL_error(L, "'__gc' metamethods are not available in specs (finalizers would run outside "
                                 "the instruction limit)");
        lua_pop(L, 1);
    }
    if (luaL_getmetafield(L, 1, "__metatable") != LUA_TNIL)
        return luaL_error(L, "cannot change a protected metatable");
    lua_settop(L, 2);
    lua_setmetatable(L, 1);
    return 1;
}

/* Lua's pattern matcher backtracks inside C, out of the instruction hook's sight: a pattern with
 * q quantifiers can take about n^(q+1) steps on n characters. The string functions that match
 * refuse work beyond PATTERN_STEPS (far more than any spec needs) instead of hanging. */
#define PATTERN_STEPS 1e9

static int sb_pattern_guard(lua_State *L) {
    size_t n = 0, plen = 0;
    const char *subject = lua_tolstring(L, 1, &n);
    const char *pattern = lua_tolstring(L, 2, &plen);
    int plain = lua_toboolean(L, lua_upvalueindex(2)) && lua_toboolean(L, 4);   /* find(s, p, init, true) */
    if (subject && pattern && !plain) {
        int quantifiers = 0;
        for (size_t i = 0; i < plen; i++) {
            if (pattern[i] == '%') { i++; continue; }
            if (pattern[i] == '*' || pattern[i] == '+' || pattern[i] == '-' || pattern[i] == '?') quantifiers++;
        }
        double steps = 1;
        for (int k = 0; k <= quantifiers && steps <= PATTERN_STEPS; k++) steps *= (double)n + 1;
        if (steps > PATTERN_STEPS)
            return luaL_error(L, "pattern '%s' with %d repetitions on %d characters could backtrack for hours; "
                                 "use fewer repetitions or a shorter string", plen > 40 ? "..." : pattern,
                              quantifiers, (int)n);
    }
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}

/* print goes to stderr so that it never mixes with a command's output. */
static int sb_print(lua_State *L) {
    int n = lua_gettop(L);
    for (int i = 1; i <= n; i++) {
        size_t len;
        const char *s = luaL_tolstring(L, i, &len);
        if (i > 1) fputc('\t', stderr);
        fwrite(s, 1, len, stderr);
        lua_pop(L, 1);
    }
    fputc('\n', stderr);
    return 0;
}

/* Edit distance between two short names (0 when equal; 99 for names over 40 characters), for
 * "did you mean" hints on globals here and on spec keys in spec.c. */
int name_distance(const char *a, const char *b) {
    int la = strlen(a), lb = strlen(b);
    if (la > 40 || lb > 40) return 99;
    int d[41][41];
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            d[i][j] = best;
        }
    return d[la][lb];
}

/* The global closest to name (at most 2 edits away) into buf, or "". */
static void nearest_global(lua_State *L, const char *name, char *buf, size_t n) {
    int best = 3;
    buf[0] = 0;
    lua_pushglobaltable(L);
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) != LUA_TSTRING) continue;
        const char *key = lua_tostring(L, -1);
        int d = name_distance(name, key);
        if (d < best) { best = d; snprintf(buf, n, "%s", key); }
    }
    lua_pop(L, 1);
}

static int strict_index(lua_State *L) {
    Sandbox *sb = sandbox_of(L);
    const char *name = lua_tostring(L, 2);
    if (!name) return luaL_error(L, "undeclared global of type %s", luaL_typename(L, 2));
    for (int i = 0; UNAVAILABLE[i]; i++)
        if (strcmp(name, UNAVAILABLE[i]) == 0)
            return luaL_error(L, "'%s' is not available in specs (specs are data: they cannot run "
                                 "programs, open files or load code; compute values with plain Lua, "
                                 "string, table, math and utf8)", name);
    char near[64], hint[100] = "misspelt?";
    nearest_global(L, name, near, sizeof near);
    if (near[0]) snprintf(hint, sizeof hint, "did you mean '%s'?", near);
    return luaL_error(L, "undeclared global '%s' (%s a spec sees only %s, the Lua basics and "
                         "string, table, math, utf8; declare your own names with 'local')",
                      name, hint, sb->defined[0] ? sb->defined : "the libraries");
}

static int strict_newindex(lua_State *L) {
    const char *name = lua_tostring(L, 2);
    return luaL_error(L, "assignment to undeclared global '%s' (specs may not create globals: "
                         "write 'local %s = ...')", name ? name : "?", name ? name : "x");
}

Sandbox *sandbox_new(size_t mem_cap, long instr_limit) {
    Sandbox *sb = calloc(1, sizeof *sb);
    if (!sb) return NULL;
    sb->cap = mem_cap;
    sb->limit = instr_limit;
    lua_State *L = lua_newstate(sb_alloc, sb);
    if (!L) { free(sb); return NULL; }
    static const luaL_Reg libs[] = {
        {LUA_GNAME, luaopen_base}, {LUA_STRLIBNAME, luaopen_string}, {LUA_TABLIBNAME, luaopen_table},
        {LUA_MATHLIBNAME, luaopen_math}, {LUA_UTF8LIBNAME, luaopen_utf8}, {NULL, NULL},
    };
    for (const luaL_Reg *lib = libs; lib->func; lib++) {
        luaL_requiref(L, lib->name, lib->func, 1);
        lua_pop(L, 1);
    }
    lua_pushglobaltable(L);
    for (int i = 0; UNAVAILABLE[i]; i++) { lua_pushnil(L); lua_setfield(L, -2, UNAVAILABLE[i]); }
    lua_pushcfunction(L, sb_pcall); lua_setfield(L, -2, "pcall");
    lua_pushcfunction(L, sb_print); lua_setfield(L, -2, "print");
    lua_pushcfunction(L, sb_setmetatable); lua_setfield(L, -2, "setmetatable");
    lua_getfield(L, -1, "string");
    lua_pushnil(L); lua_setfield(L, -2, "dump");     /* bytecode is of no use without load */
    static const char *const matchers[] = {"find", "match", "gmatch", "gsub", NULL};
    for (int i = 0; matchers[i]; i++) {
        lua_getfield(L, -1, matchers[i]);
        lua_pushboolean(L, strcmp(matchers[i], "find") == 0);   /* has a "plain" 4th argument */
        lua_pushcclosure(L, sb_pattern_guard, 2);
        lua_setfield(L, -2, matchers[i]);
    }
    lua_pop(L, 1);
    lua_newtable(L);                                  /* metatable of _G: strict globals */
    lua_pushcfunction(L, strict_index); lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, strict_newindex); lua_setfield(L, -2, "__newindex");
    lua_pushboolean(L, 0); lua_setfield(L, -2, "__metatable");
    lua_setmetatable(L, -2);
    lua_pop(L, 1);
    lua_sethook(L, sb_hook, LUA_MASKCOUNT, HOOK_EVERY);
    sb->L = L;
    return sb;
}

lua_State *sandbox_lua(Sandbox *sb) { return sb->L; }

void sandbox_define(Sandbox *sb, const char *name) {
    lua_State *L = sb->L;
    lua_pushglobaltable(L);
    lua_insert(L, -2);
    lua_pushstring(L, name);
    lua_insert(L, -2);
    lua_rawset(L, -3);           /* raw: the strict __newindex refuses new keys */
    lua_pop(L, 1);
    size_t n = strlen(sb->defined);
    snprintf(sb->defined + n, sizeof sb->defined - n, "%s%s", n ? ", " : "", name);
}

static void oom_message(Sandbox *sb, char *err, size_t errlen) {
    snprintf(err, errlen, "%s%sspec uses more than %zu MiB of memory (a loop growing a table or "
             "string without end?)", sb->oom_where, sb->oom_where[0] ? ": " : "", sb->cap >> 20);
}

int sandbox_load(Sandbox *sb, const char *path, const char *text, size_t len, char *err, size_t errlen) {
    char chunkname[600];
    snprintf(chunkname, sizeof chunkname, "@%s", path);
    if (sb->nchunks < 16) snprintf(sb->chunks[sb->nchunks++], sizeof sb->chunks[0], "%s", path);
    sb->out_of_memory = 0;
    int rc = luaL_loadbufferx(sb->L, text, len, chunkname, "t");
    if (rc == LUA_OK) return 0;
    if (rc == LUA_ERRMEM || sb->out_of_memory) oom_message(sb, err, errlen);
    else {
        const char *msg = lua_tostring(sb->L, -1);
        if (msg && strstr(msg, "binary chunk"))
            snprintf(err, errlen, "%s:1: this is a compiled (binary) chunk; specs must be Lua source text", path);
        else {
            char full[2000];
            snprintf(err, errlen, "%s", msg ? full_path_message(sb, msg, full, sizeof full) : "syntax error");
        }
    }
    lua_pop(sb->L, 1);
    return 2;
}

int sandbox_pcall(Sandbox *sb, int nargs, int nresults, char *err, size_t errlen) {
    lua_State *L = sb->L;
    int base = lua_gettop(L) - nargs;
    lua_pushcfunction(L, sb_message_handler);
    lua_insert(L, base);
    sb->out_of_memory = 0;
    int rc = lua_pcall(L, nargs, nresults, base);
    lua_remove(L, base);
    if (rc == LUA_OK) return 0;
    if (rc == LUA_ERRMEM || sb->out_of_memory) oom_message(sb, err, errlen);
    else {
        const char *msg = lua_tostring(L, -1);
        snprintf(err, errlen, "%s", msg ? msg : "error without a message");
    }
    lua_pop(L, 1);
    return 2;
}

size_t sandbox_bytes_used(Sandbox *sb) { return sb->used; }
long sandbox_instructions(Sandbox *sb) { return sb->instructions; }

void sandbox_close(Sandbox *sb) {
    if (!sb) return;
    if (sb->L) lua_close(sb->L);
    free(sb);
}
