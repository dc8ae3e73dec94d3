# bash completion for overlapctl: its subcommands (and theirs: `tuning list`),
# each one's flags, and the values a flag names (`--scheduler static|dynamic`,
# `--dtype bf16|...`; files for a text value or a positional such as a graph).
#
# Nothing is listed here: the commands and flags are read from the binary's own
# `overlapctl [COMMAND...] --help` (CLI11's layout) the first time each is
# needed, and kept for the shell's life, so they follow the installed version.
# --help is answered without a daemon, so completing never waits on one.
# Installed by deploy/install.sh to share/bash-completion/completions/overlapctl.

declare -gA _overlapctl_loaded=() _overlapctl_subs=() _overlapctl_flags=() \
  _overlapctl_kind=() _overlapctl_choices=()

# Prints "sub NAME" per subcommand and "opt NAMES KIND CHOICES" per option of
# one --help text. KIND: flag (no value), num, or text; CHOICES: a {a,b} set or
# a description that starts "a | b | c", comma-separated, else "-". CLI11 puts
# the description at column 31, or on the next line when the names are wider.
_overlapctl_parse_help() {
  awk '
    function flush() { if (names != "") print "opt", names, kind, (choices == "" ? "-" : choices); names = "" }
    function choices_of(desc,   m) {
      if (match(desc, /^[a-z0-9_.-]+( \| [a-z0-9_.-]+)+/)) {
        m = substr(desc, 1, RLENGTH); gsub(/ \| /, ",", m); return m
      }
      return ""
    }
    /^Subcommands:/ { flush(); sect = "sub"; next }
    /^Options:/ { flush(); sect = "opt"; next }
    /^[^ ]/ { flush(); sect = ""; next }
    sect == "sub" && /^  [a-z]/ { print "sub", $1; next }
    sect == "opt" && /^  -/ {
      flush()
      names = $1; kind = "flag"; choices = ""
      if ($2 ~ /^(INT|UINT|FLOAT)/) kind = "num"
      else if ($2 ~ /^[A-Z][A-Z]+([:=].*)?$/) kind = "text"
      if (match($2, /\{[^}]*\}/)) choices = substr($2, RSTART + 1, RLENGTH - 2)
      else if (kind == "text" && substr($0, 30, 1) == " " && substr($0, 31, 1) != " ")
        choices = choices_of(substr($0, 31))
      next
    }
    sect == "opt" && names != "" && /^                              [^ ]/ {
      if (kind == "text" && choices == "") choices = choices_of(substr($0, 31))
      next
    }
    END { flush() }'
}

# Loads what `PROG PATH... --help` says into the tables, under "PROG|PATH".
_overlapctl_load() {
  local prog=$1 path=$2 key="$1|$2" what names kind choices name
  [[ -n ${_overlapctl_loaded[$key]:-} ]] && return 0
  _overlapctl_loaded[$key]=1
  local -a words=()
  [[ -n $path ]] && read -r -a words <<< "$path"
  while read -r what names kind choices; do
    if [[ $what == sub ]]; then
      _overlapctl_subs[$key]+="$names "
      continue
    fi
    for name in ${names//,/ }; do
      _overlapctl_flags[$key]+="$name "
      _overlapctl_kind[$key|$name]=$kind
      [[ $choices != - ]] && _overlapctl_choices[$key|$name]=${choices//,/ }
    done
  done < <("$prog" "${words[@]}" --help 2>/dev/null | _overlapctl_parse_help)
}

# The kind of FLAG under PATH or, CLI11 letting the top level's options follow
# a subcommand, under the top level.
_overlapctl_flag() {
  local prog=$1 path=$2 flag=$3
  if [[ -n ${_overlapctl_kind[$prog|$path|$flag]:-} ]]; then
    REPLY="$prog|$path|$flag"
  elif [[ -n ${_overlapctl_kind[$prog||$flag]:-} ]]; then
    REPLY="$prog||$flag"
  else
    REPLY=""
  fi
}

_overlapctl_files() {
  compopt -o filenames 2>/dev/null
  mapfile -t COMPREPLY < <(compgen -f -- "$1")
}

_overlapctl() {
  local prog=${COMP_WORDS[0]/#\~/$HOME}
  command -v "$prog" >/dev/null 2>&1 || return 0
  local cword=$COMP_CWORD cur=${COMP_WORDS[COMP_CWORD]} valued=""
  COMPREPLY=()

  # COMP_WORDBREAKS splits --flag=value into "--flag" "=" "value".
  if [[ $cur == "=" ]]; then
    cur="" valued=${COMP_WORDS[cword - 1]}
  elif (( cword >= 2 )) && [[ ${COMP_WORDS[cword - 1]} == "=" ]]; then
    valued=${COMP_WORDS[cword - 2]}
  fi

  # Walk the words before the cursor: subcommands deepen the path; a flag that
  # takes a value skips it.
  local path="" i word
  _overlapctl_load "$prog" ""
  for (( i = 1; i < cword; i++ )); do
    word=${COMP_WORDS[i]}
    if [[ $word == -* ]]; then
      _overlapctl_flag "$prog" "$path" "$word"
      if [[ -n $REPLY && ${_overlapctl_kind[$REPLY]} != flag ]]; then
        if [[ ${COMP_WORDS[i + 1]:-} == "=" ]]; then (( i += 2 )); else (( i += 1 )); fi
        (( i >= cword )) && [[ -z $valued ]] && valued=$word
      fi
    elif [[ $word != "=" && " ${_overlapctl_subs[$prog|$path]:-} " == *" $word "* ]]; then
      path=${path:+$path }$word
      _overlapctl_load "$prog" "$path"
    fi
  done

  # A flag's value.
  if [[ -n $valued ]]; then
    _overlapctl_flag "$prog" "$path" "$valued"
    [[ -z $REPLY ]] && return 0
    if [[ -n ${_overlapctl_choices[$REPLY]:-} ]]; then
      mapfile -t COMPREPLY < <(compgen -W "${_overlapctl_choices[$REPLY]}" -- "$cur")
    elif [[ ${_overlapctl_kind[$REPLY]} == text ]]; then
      _overlapctl_files "$cur"
    fi
    return 0
  fi

  if [[ $cur == -* ]]; then
    mapfile -t COMPREPLY < <(compgen -W "${_overlapctl_flags[$prog|$path]:-} ${path:+${_overlapctl_flags[$prog|]:-}}" -- "$cur" | sort -u)
  elif [[ -n ${_overlapctl_subs[$prog|$path]:-} ]]; then
    mapfile -t COMPREPLY < <(compgen -W "${_overlapctl_subs[$prog|$path]}" -- "$cur")
  elif [[ -n $path ]]; then
    _overlapctl_files "$cur"  # a positional: a graph, an output file (job ids are not listed)
  fi
  return 0
}

complete -F _overlapctl overlapctl
