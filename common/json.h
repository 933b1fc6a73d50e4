/* json.h: a small JSON reader (a parsed tree: numbers as double, strings unescaped, UTF-8 kept as
 * bytes) and a string writer, shared by safetensors headers, checkpoints' state.json,
 * tokenizer.json and the Hugging Face files import and export read. */
#ifndef BOOST_JSON_H
#define BOOST_JSON_H

#include <stddef.h>
#include <stdio.h>

enum JsonType { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT };
typedef struct Json {
    int type;
    double num;               /* JSON_NUMBER, JSON_BOOL (0/1) */
    char *str;                /* JSON_STRING */
    int n;                    /* JSON_ARRAY / JSON_OBJECT: number of items */
    char **keys;              /* JSON_OBJECT: key of each item */
    struct Json *items;
} Json;

/* Parse text[0..len). Returns NULL with "byte N: what is wrong" in err. */
Json *json_parse(const char *text, size_t len, char *err, size_t errlen);
void json_free(Json *j);
const Json *json_get(const Json *obj, const char *key);   /* NULL when absent or not an object */
/* Write s as a JSON string literal (with quotes and escapes). */
void json_write_string(FILE *f, const char *s);

#endif
