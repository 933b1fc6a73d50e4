/* token_file.h: the llm.c token file's header constants, shared by its writer
 * (runtime/tokenize_files.c, data_write_token_file) and its reader (runtime/data.c): 256 int32s
 * (magic, version, token count, zeros), then the tokens as uint16 (version 1) or uint32
 * (version 2). */
#ifndef BOOST_TOKEN_FILE_H
#define BOOST_TOKEN_FILE_H

#define TOKEN_FILE_MAGIC 20240520
#define TOKEN_FILE_VERSION 1       /* uint16 tokens */
#define TOKEN_FILE_VERSION_U32 2   /* uint32 tokens */
#define TOKEN_FILE_HEADER_INTS 256

#endif
