/*
 * A one-shot timer on CLOCK_BOOTTIME, watched by the loop. libuv's timers
 * run on CLOCK_MONOTONIC, which stands still while the machine is
 * suspended; a lease at the server does not. This one fires at once after
 * a resume if its time passed meanwhile. Used for everything that must
 * happen by a lease's deadline.
 *
 * May use: nothing of lockrun's.
 */
#ifndef LR_BTIMER_H
#define LR_BTIMER_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

typedef struct lr_btimer lr_btimer;
typedef void (*lr_btimer_fn)(void *arg);

uint64_t lr_btimer_now_ms(void);
lr_btimer *lr_btimer_create(uv_loop_t *loop, lr_btimer_fn fn, void *arg);
void lr_btimer_destroy(lr_btimer *t);
bool lr_btimer_arm(lr_btimer *t, uint64_t at_ms);
void lr_btimer_disarm(lr_btimer *t);
bool lr_btimer_armed(const lr_btimer *t);

#endif
