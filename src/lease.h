/*
 * The lease constants that lock, status, history and sweep must agree on.
 * Header only.
 *
 * May use: nothing of lockrun's.
 */
#ifndef LR_LEASE_H
#define LR_LEASE_H

/*
 * The sweep's grace. A hold or a waiter row is swept (and its permits
 * granted to others) only once it expired more than this long ago by the
 * server's clock; until then it counts as live everywhere (acquire, poll,
 * lockrunctl status), and its owner may still renew it. A forward step of
 * the server's clock (NTP, a VM resumed, a manual `date`) of up to this
 * much therefore ends no lease early: a holder stops its command ttl after
 * its last renewal by its own clock, and nobody else is granted before
 * ttl + grace by the server's. The cost: a crashed holder's lock is free
 * after ttl + grace, not ttl. 5 s is well above what time daemons step by
 * after a short outage and small next to the ttl users choose.
 */
#define LR_SWEEP_GRACE_MS 5000
#define LR_STR_(x)        #x
#define LR_STR(x)         LR_STR_(x)
#define LR_SQL_GRACE      "INTERVAL " LR_STR(LR_SWEEP_GRACE_MS) "000 MICROSECOND"

/*
 * How long a raise of max_ttl_ms waits before grants may use it, on a
 * server with a binary log (sql/010-ttl-bound.sql): a fail-over's
 * quarantine is the new primary's max_ttl_ms, so a replica must have the
 * raise before any lease longer than the old value exists. One that is
 * further behind than this at a fail-over may quarantine too briefly
 * (doc/production.md). A minute: far more than a healthy replica lags,
 * little for an operator who raises the limit ahead of a change.
 */
#define LR_MAX_TTL_RAISE_DELAY_S 60

#endif
