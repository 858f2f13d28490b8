# bash completion for lockrun and lockrunctl                 -*- shell-script -*-
#
# Installed as bash-completion's completions/lockrun, with completions/
# lockrunctl a link to it. Lock names come from the database, through
# "lockrunctl list --names" (with the -c FILE of the command line being
# completed, if any), given a second at most: when the database is
# slow, unreachable or not configured, names are simply not offered.
# Works without the bash-completion package too (then sourced by hand).
#
# COMPREPLY=($(compgen ...)) splits compgen's words on purpose, as every
# bash completion does; the words it offers have no blanks.
# shellcheck disable=SC2207

# _lockrun_words: words and cword, like COMP_WORDS and COMP_CWORD but with
# what bash splits at '=' and ':' joined again: "--opt=value", "id:KEY".
# wfirst[N]: the index in COMP_WORDS where words[N] starts.
_lockrun_words()
{
    local i w join=
    words=() wfirst=() cword=0
    for ((i = 0; i < ${#COMP_WORDS[@]}; i++)); do
        w=${COMP_WORDS[i]}
        if ((i > 0)) && [[ -n $join || $w == : ||
            ($w == = && ${words[-1]} == --* && ${words[-1]} != *=*) ]]; then
            words[-1]+=$w
        else
            wfirst[${#words[@]}]=$i
            words+=("$w")
        fi
        join=
        [[ $w == [:=] && ${words[-1]} != *[:=]?*[:=] ]] && join=1
        ((i == COMP_CWORD)) && cword=$((${#words[@]} - 1))
    done
}

# _lockrun_names [CONFIG [KIND]]: the lock names the database knows (of
# KIND: semaphore, mutex, rwlock or key), one a line;
# nothing, quietly, if it fails or does not answer within a second
# (then what it printed so far may be cut short: it is not used either).
_lockrun_names()
{
    local -a cfg=()
    local out
    [[ -n ${1-} ]] && cfg=(-c "$1")
    out=$(timeout -k 0.2 1 lockrunctl "${cfg[@]}" -q list ${2:+"$2"} --names 2>/dev/null </dev/null) &&
        printf '%s\n' "$out"
}

# _lockrun_config: the -c/--config FILE given on the command line so far.
_lockrun_config()
{
    local i w
    for ((i = 1; i < cword; i++)); do
        w=${words[i]}
        case $w in
            -c | --config) printf '%s' "${words[i + 1]-}" ;;
            --config=*) printf '%s' "${w#--config=}" ;;
            -c?*) printf '%s' "${w#-c}" ;;
            --) return ;;
        esac
    done
}

# _lockrun_reply_names KIND PREFIX: COMPREPLY gets the names matching
# PREFIX; KIND "key": the --id keys (listed as id:KEY, offered as KEY),
# "lock": the other locks, "all": all of them as listed.
_lockrun_reply_names()
{
    local kind=$1 cur=$2 name
    local -a names=()
    while IFS= read -r name; do
        [[ -n $name ]] || continue
        case $kind:$name in
            key:id:*) names+=("${name#id:}") ;;
            key:*) ;;
            all:*) names+=("$name") ;;
            *:id:*) ;;
            *) names+=("$name") ;;
        esac
    done < <(_lockrun_names "$(_lockrun_config)" "$(case $kind in
        semaphore | mutex | rwlock | key) printf '%s' "$kind" ;; esac)")
    # bash replaces only what follows the last ':' of the word
    local colon=
    [[ $cur == *:* && $COMP_WORDBREAKS == *:* ]] && colon=${cur%"${cur##*:}"}
    COMPREPLY=()
    for name in "${names[@]}"; do
        [[ $name == "$cur"* ]] && COMPREPLY+=("${name#"$colon"}")
    done
}

# _lockrun_files PREFIX: file names, as bash-completion's _filedir would.
_lockrun_files()
{
    if declare -F _filedir >/dev/null; then
        _filedir
    else
        local IFS=$'\n'
        COMPREPLY=($(compgen -f -- "$1"))
    fi
}

_lockrun()
{
    local -a words wfirst
    local cword cur prev i w havelock=
    _lockrun_words
    cur=${words[cword]} prev=${words[cword - 1]-}
    COMPREPLY=()

    # Where the command starts: after "--", or at the first word that is
    # not an option or an option's value (lockrun stops parsing there).
    for ((i = 1; i < cword; i++)); do
        w=${words[i]}
        case $w in
            --) ((i++)); break ;;
            -s | --semaphore | -x | --mutex | --read | --write | --named | --id)
                havelock=1 i=$((i + 1)) ;;
            -w | --wait | --timeout | -E | --conflict-exit-code | --ttl | \
                --kill-after | --on-lost | --once-per | --once-offset | --log-format | \
                --done-exit-code | --min-hold | -c | --config)
                ((i++)) ;;
            --semaphore=* | --mutex=* | --read=* | --write=* | --named=* | --id=* | \
                -s?* | -x?*)
                havelock=1 ;;
            -*) ;;
            *) break ;;
        esac
    done
    # The command's words (or the first of them): complete as commands.
    if ((i < cword)) || { ((i == cword)) && [[ ${words[i - 1]} == -- ||
        ($cur != -* && (-n $cur || -n $havelock)) ]]; }; then
        if declare -F _command_offset >/dev/null; then
            _command_offset "${wfirst[i]}"
        else
            COMPREPLY=($(compgen -c -- "$cur"))
        fi
        return 0
    fi

    # --opt=value: complete the value, as after "--opt value"
    if [[ $cur == --*=* ]]; then
        prev=${cur%%=*} cur=${cur#*=}
    elif ((i == cword)); then
        COMPREPLY=($(compgen -W '-s --semaphore -x --mutex --read --write --named
            --id -n --nonblock -w --wait --timeout -E --conflict-exit-code --ttl
            --kill-after --on-lost --once-per --once-offset --done-exit-code
            --min-hold --local-queue --no-local-queue -c --config -v --verbose
            -q --quiet --log-format -h --help -V --version --' -- "$cur"))
        return 0
    fi
    case $prev in
        -s | --semaphore)
            _lockrun_reply_names semaphore "$cur" ;;
        -x | --mutex)
            _lockrun_reply_names mutex "$cur" ;;
        --read | --write)
            _lockrun_reply_names rwlock "$cur" ;;
        --named)
            _lockrun_reply_names lock "$cur" ;;
        --id)
            _lockrun_reply_names key "$cur" ;;
        --on-lost)
            COMPREPLY=($(compgen -W 'kill ignore' -- "$cur")) ;;
        --log-format)
            COMPREPLY=($(compgen -W 'text json' -- "$cur")) ;;
        -c | --config)
            _lockrun_files "$cur" ;;
    esac
    return 0
}

_lockrunctl()
{
    local -a words wfirst
    local cword cur prev i w cmd='' nargs=0
    _lockrun_words
    cur=${words[cword]} prev=${words[cword - 1]-}
    COMPREPLY=()

    # The command: the first word that is not a global option or its
    # value; then how many arguments it has before the current word.
    for ((i = 1; i < cword; i++)); do
        w=${words[i]}
        if [[ -z $cmd ]]; then
            case $w in
                -c | --config) ((i++)) ;;
                -*) ;;
                *) cmd=$w ;;
            esac
        else
            case $w in
                --format | --since | --until | --limit | --retention | --reason | -o | \
                    --output) ((i++)) ;;
                -*) ;;
                *) ((nargs++)) ;;
            esac
        fi
    done

    if [[ $cur == --*=* ]]; then
        prev=${cur%%=*} cur=${cur#*=}
    fi
    case $prev in
        -c | --config)
            _lockrun_files "$cur"
            return 0 ;;
        --format)
            COMPREPLY=($(compgen -W 'text json prometheus' -- "$cur"))
            return 0 ;;
        -o | --output)
            _lockrun_files "$cur"
            return 0 ;;
        --since | --until | --limit | --retention | --reason)
            return 0 ;;
    esac

    if [[ -z $cmd ]]; then
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W '-c --config -j --json -v --verbose -q --quiet
                -h --help -V --version' -- "$cur"))
        else
            COMPREPLY=($(compgen -W 'init set status list history timeline check
                release delete pause resume sweep doctor max-ttl new-epoch' -- "$cur"))
        fi
        return 0
    fi

    local opts='' which=''
    case $cmd in
        set) ((nargs == 0)) && which=semaphore ;;
        delete | resume) ((nargs == 0)) && which=all ;;
        pause) opts='--reason'; ((nargs == 0)) && which=all ;;
        timeline) opts='--since --until --output'; which=all ;;
        status) opts='--format --json'; ((nargs == 0)) && which=all ;;
        history) opts='--since --limit --json --format'; ((nargs == 0)) && which=all ;;
        list) opts='--names --json --format'
            ((nargs == 0)) && [[ $cur != -* ]] &&
                COMPREPLY=($(compgen -W 'semaphore mutex rwlock key' -- "$cur")) && return 0 ;;
        sweep) opts='--retention --json --format' ;;
        release) opts='--reason --json --format' ;;
        check | doctor | max-ttl) opts='--json --format' ;;
    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
    elif [[ -n $which ]]; then
        _lockrun_reply_names "$which" "$cur"
    fi
    return 0
}

complete -F _lockrun lockrun
complete -F _lockrunctl lockrunctl
