/* Streaming split of generated text into reasoning and answer, as llama.cpp
 * (reasoning_format "deepseek") and vLLM's Qwen3 reasoning parser return it
 * in reasoning_content and content:
 *   "<think>R</think>C"  -> reasoning R, content C
 *   "<think>R" (no end)  -> reasoning R, content "" (cut off while thinking)
 *   "C" (no <think>)     -> content C unchanged
 * The opening tag counts only at the start (after whitespace). R is trimmed
 * of surrounding whitespace and C of leading whitespace. This is
 * chat_split_reasoning (src/text/chat.h) fed piece by piece, with one
 * difference: "R</think>C" without an opening tag stays content, because
 * deciding otherwise would hold back the whole answer until the end. The
 * server uses this one splitter for streamed and whole responses alike, so
 * both give the same text.
 *
 * Text is handed out as soon as it is decided: only whitespace and a
 * possible partial tag are held back. */
#ifndef E0_SERVER_THINK_H
#define E0_SERVER_THINK_H

#include <stdbool.h>
#include <stddef.h>

/* Receives decided text: reasoning != 0 for reasoning_content. Returns 0, or
 * non-zero when it could not take the text (out of memory). */
typedef int (*srv_think_fn)(void *user, int reasoning, const char *s, size_t n);

typedef struct {
    int state;       /* where the stream is: see think.c */
    char *pend;      /* bytes received and not yet handed out */
    size_t len, cap;
    bool has_reasoning;
} srv_think;

void srv_think_init(srv_think *t);
/* For a prompt that already opened the think block (Qwen3.5's generation
 * prompt ends with "<think>\n"): the text starts as reasoning. */
void srv_think_init_opened(srv_think *t);
void srv_think_free(srv_think *t);
/* Returns 0, or non-zero when `fn` or an allocation failed. */
int srv_think_feed(srv_think *t, const char *s, size_t n, srv_think_fn fn, void *user);
/* The text fed so far ends inside the think block (after "<think>",
 * before "</think>"): what comes next is reasoning unless it closes it. */
bool srv_think_in_reasoning(const srv_think *t);
/* End of the text: hands out what is still held back. */
int srv_think_finish(srv_think *t, srv_think_fn fn, void *user);

#endif
