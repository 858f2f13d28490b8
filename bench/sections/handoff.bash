# shellcheck shell=bash
#
# bench/sections/handoff.bash: the "handoff" section of bench/run, sourced
# by it.
#
# Measures the dead time at one change of holder with one waiter: a mutex,
# a semaphore of 3 whose youngest holder leaves, a writer behind three
# readers, and flock(1) in the same harness for what two processes waking,
# a fork and an exec cost on this machine.
# How: N_HANDOFF rounds of each (handoff_round, in bench/lib.bash): the
# freeing command ends with `stamp FILE end`, the waiter's command is
# `stamp FILE start` (bench/stamp.c); the figure is start minus end.
# To the page: the table "Hand-off" (median, p90, min, max), a headline and
# three rows of the targets table (handoff_targets), from data/handoff.
# Uses bench/run's T, LOCKRUNCTL, N_HANDOFF, md, headline and log.

# ho_p50 KIND: the median hand-off of KIND in ms, from the section's data.
ho_p50() { fmt_ms "$(awk -v k="$1" '$1 == k { print $2 }' "$T/data/handoff")"; }

section_handoff() {
	local kind i p50 p90 lo hi
	"$LOCKRUNCTL" -c "$T/db/admin.conf" -q set ho-sem 3
	: >"$T/data/handoff"
	md "## Hand-off" ""
	md "One waiter at a time, $N_HANDOFF rounds each: the time from the end of the command" \
		"that frees room to the start of the waiting command." ""
	md "| hand-off | median ms | p90 ms | min ms | max ms |" "| --- | ---: | ---: | ---: | ---: |"
	local -A ho_label=([mutex]="lockrun -x (mutex)" [semaphore]="lockrun -s, semaphore of 3, its youngest holder leaves"
		[writer]="lockrun --write behind three --read" [flock]="flock")
	for kind in mutex semaphore writer flock; do
		log "hand-off: $kind, $N_HANDOFF rounds"
		: >"$T/data/handoff.$kind"
		for ((i = 0; i < N_HANDOFF; i++)); do
			handoff_round "$kind" "$T/data/handoff.$kind"
		done
		read -r p50 p90 lo hi < <(pct "$T/data/handoff.$kind" 50 90 0 100)
		md "| ${ho_label[$kind]} | $(fmt_ms "$p50") | $(fmt_ms "$p90") | $(fmt_ms "$lo") | $(fmt_ms "$hi") |"
		echo "$kind $p50 $p90" >>"$T/data/handoff"
	done
	headline "Hand-off with one waiter, median: mutex $(ho_p50 mutex) ms, semaphore of 3" \
		"$(ho_p50 semaphore) ms, writer behind readers $(ho_p50 writer) ms (flock $(ho_p50 flock) ms" \
		"in the same harness)."
	md "" "How measured: a holder runs \`sh -c 'sleep 0.15; exec stamp FILE end'\` and, once it" \
		"holds, one waiter runs \`stamp FILE start\`; stamp (bench/stamp.c) takes its times" \
		"(CLOCK_REALTIME) with no shell inside the window. For the semaphore, two other holders" \
		"keep holding while the youngest leaves; for the writer, three readers hold and the one" \
		"that leaves last frees it. flock(1) in the same harness shows what two processes" \
		"waking, a fork and an exec cost on this machine. How to read: the dead time a hot" \
		"lock loses at each change of holder when the machine has CPU to spare (see" \
		"Contention for a busy one)." ""
}

# handoff_targets: the section's rows of the targets table.
handoff_targets() {
	local f=$T/data a b
	local -A kinds=([mutex]="mutex" [semaphore]="semaphore of 3" [writer]="writer behind readers")
	for a in mutex semaphore writer; do
		b=
		[[ -s $f/handoff ]] && b=$(awk -v k="$a" '$1 == k { print $2 }' "$f/handoff")
		if [[ -n $b && $b != - ]]; then
			target "median hand-off with one waiter, ${kinds[$a]}" "< 10 ms" "$(fmt_ms "$b") ms" "$(calc "$b < 10000")"
		else
			target "median hand-off with one waiter, ${kinds[$a]}" "< 10 ms" - ""
		fi
	done
}
