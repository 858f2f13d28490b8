# shellcheck shell=bash
#
# Children's own records: each child appends "enter NAME WEIGHT" and
# "leave NAME WEIGHT" lines under a local file lock, so the tests judge
# exclusion from what the children saw, not from what lockrun says.

# rec_cmd FILE NAME[:WEIGHT]... [-- SECONDS | -- until GOFILE]: a shell
# command for lockrun to run that enters, sleeps (default 0.1 s) or waits
# until GOFILE exists (a holder that must outlast the test's checks on a
# loaded machine), and leaves.
rec_cmd() {
	local file=$1 secs=0.1 items=() pause
	shift
	while (($#)); do
		if [[ $1 == -- ]]; then
			secs=$2
			[[ $2 != until ]] || secs="until:$3"
			break
		fi
		items+=("$1")
		shift
	done
	local enter="" leave="" it
	for it in "${items[@]}"; do
		enter+="echo enter ${it%%:*} $([[ $it == *:* ]] && echo "${it#*:}" || echo 1) \$LOCKRUN_FENCE;"
		leave+="echo leave ${it%%:*} $([[ $it == *:* ]] && echo "${it#*:}" || echo 1);"
	done
	if [[ $secs == until:* ]]; then
		pause=$(printf 'while [ ! -e %q ]; do sleep 0.02; done' "${secs#until:}")
	else
		pause="sleep $secs"
	fi
	printf 'flock %q sh -c %q >>%q; %s; flock %q sh -c %q >>%q' \
		"$file.lk" "$enter" "$file" "$pause" "$file.lk" "$leave" "$file"
}

# rec_max FILE NAME: the most weight of NAME ever inside at once.
rec_max() {
	awk -v n="$2" '$2 == n && $1 == "enter" { u += $3; if (u > m) m = u }
		$2 == n && $1 == "leave" { u -= $3 } END { print m + 0 }' "$1"
}

# rec_count FILE WHAT NAME: how many enter (or leave) records NAME has.
rec_count() {
	awk -v w="$2" -v n="$3" '$1 == w && $2 == n { c++ } END { print c + 0 }' "$1"
}

# setup_records: an empty database and an empty record file, $rec.
setup_records() {
	reset_db
	rec=$BATS_TEST_TMPDIR/rec
	: >"$rec"
}

# A command that records enter (with its token), runs until SIGTERM, and
# records leave when it gets it (into $rec, under its flock).
loop_cmd() {
	local name=$1
	# shellcheck disable=SC2016 # $LOCKRUN_FENCE is for the command's shell
	printf 'flock %q sh -c "echo enter %s \\$LOCKRUN_FENCE >>%q"; trap "flock %q sh -c \\"echo leave %s >>%q\\"; exit 0" TERM; while :; do sleep 0.05; done' \
		"$rec.lk" "$name" "$rec" "$rec.lk" "$name" "$rec"
}

# until_cmd NAME: a command that records "enter NAME MS" (MS: wall clock in
# milliseconds), stays until the file $BATS_TEST_TMPDIR/go.NAME exists, and
# records "leave NAME MS" just before it exits (into $rec, under its flock).
until_cmd() {
	local go=$BATS_TEST_TMPDIR/go.$1
	printf 'flock %q sh -c %q; while [ ! -e %q ]; do sleep 0.01; done; flock %q sh -c %q' \
		"$rec.lk" "echo enter $1 \$((\$(date +%s%N) / 1000000)) >>$rec" "$go" \
		"$rec.lk" "echo leave $1 \$((\$(date +%s%N) / 1000000)) >>$rec"
}

# rec_ms WHAT NAME: the time in ms an until_cmd child recorded.
rec_ms() {
	awk -v w="$1" -v n="$2" '$1 == w && $2 == n { print $3; exit }' "$rec"
}

# fault_cmd FILE NAME ID SECONDS: a child for the fault tests (Galera's,
# the group's): like rec_cmd's, but each record carries the run's id, the
# enter record also the wall clock in ms ("enter NAME 1 FENCE ID MS"), and
# when lockrun stops it (SIGTERM: its lease is being lost) it records its
# leave before it dies, so a stopped run is not judged inside forever.
fault_cmd() {
	local file=$1 name=$2 id=$3 secs=$4 enter leave
	enter="echo enter $name 1 \$LOCKRUN_FENCE $id \$((\$(date +%s%N) / 1000000))"
	leave="echo leave $name 1 $id"
	printf 'trap %q TERM; flock %q sh -c %q >>%q; sleep %s; flock %q sh -c %q >>%q' \
		"flock $(printf %q "$file.lk") sh -c $(printf %q "$leave") >>$(printf %q "$file"); exit 143" \
		"$file.lk" "$enter" "$file" "$secs" "$file.lk" "$leave" "$file"
}

# judge_ids FILE NAME LIMIT: like judge, for fault_cmd's records: a leave
# counts only for a run inside, a second leave of a run (stopped while
# leaving) is ignored, and a run that never left counts as inside to the end.
judge_ids() {
	awk -v n="$2" -v lim="$3" '
		$2 != n { next }
		$1 == "enter" {
			if ($5 in inside) { printf "line %d: run %s entered twice\n", NR, $5; bad = 1 }
			inside[$5] = 1; u++
			if (u > m) m = u
			if (u > lim) { printf "line %d: %d inside at once (limit %d)\n", NR, u, lim; bad = 1 }
			if (lim == 1 && seen && $4 + 0 <= prev + 0) { printf "line %d: fence %s after %s\n", NR, $4, prev; bad = 1 }
			prev = $4; seen = 1; e++
		}
		$1 == "leave" && ($4 in inside) { delete inside[$4]; u-- }
		END {
			for (id in inside) printf "run %s never left\n", id
			printf "%s: %d runs went in, max inside: %d\n", n, e, m
			exit bad
		}' "$1"
}

# median N...: the median of whole numbers (the lower middle one).
median() {
	printf '%s\n' "$@" | sort -n | sed -n "$((($# + 1) / 2))p"
}
