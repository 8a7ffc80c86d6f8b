#!/usr/bin/env bash
# A one-node SLURM cluster on localhost for tests and CI: munged + slurmctld + slurmd (+ mariadb/slurmdbd).
#
#   tests/cluster/slurm-local.sh up      start it (idempotent), print `export SLURM_CONF=...`
#   tests/cluster/slurm-local.sh down    stop it (by pid files only) and keep the logs
#   tests/cluster/slurm-local.sh env     print the export line of a running cluster
#
# Needs root and Debian's packages:
#   apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge [slurmdbd mariadb-server]
# Settings (environment):
#   SLURM_LOCAL_DIR         state folder (default /tmp/medvision-slurm)
#   SLURM_LOCAL_ACCOUNTING  dbd (mariadb + slurmdbd: full `sacct`), filetxt (job completion log only; `sacct`
#                           then fails) or auto (default: dbd when slurmdbd and mariadbd are installed)
#   SLURM_LOCAL_PORT        first of four ports: slurmctld, slurmd, slurmdbd, mariadb (default 6817)
#   SLURM_LOCAL_PARTITION   partition name (default debug)
set -euo pipefail

DIR=${SLURM_LOCAL_DIR:-/tmp/medvision-slurm}
ACCOUNTING=${SLURM_LOCAL_ACCOUNTING:-auto}
if [[ $ACCOUNTING == auto ]]; then
    if command -v slurmdbd >/dev/null && command -v mariadbd >/dev/null; then ACCOUNTING=dbd; else ACCOUNTING=filetxt; fi
fi
PORT=${SLURM_LOCAL_PORT:-6817}
PARTITION=${SLURM_LOCAL_PARTITION:-debug}
CONF="$DIR/etc/slurm.conf"
MUNGE_SOCKET="$DIR/munge/munge.socket"
NODE=$(hostname -s)

say() { echo "slurm-local: $*" >&2; }
die() { say "error: $*"; exit 1; }

pid_alive() {  # pid_alive PIDFILE -> 0 when the pid in it is a live process
    [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

stop_pidfile() {  # stop_pidfile PIDFILE NAME: TERM, wait up to 10 s, then KILL
    local pidfile=$1 name=$2 pid i
    pid_alive "$pidfile" || { rm -f "$pidfile"; return 0; }
    pid=$(cat "$pidfile")
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        say "$name (pid $pid) did not stop on TERM; sending KILL"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
}

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...: poll every 0.1 s
    local limit=$1 what=$2 i
    shift 2
    for i in $(seq $((limit * 10))); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    return 1
}

check_tools() {
    [[ $(id -u) -eq 0 ]] || die "run as root (munged runs as the munge user, slurmd as root)"
    local tool missing=()
    for tool in munged slurmctld slurmd sbatch scontrol; do
        command -v "$tool" >/dev/null || missing+=("$tool")
    done
    if [[ $ACCOUNTING == dbd ]]; then
        for tool in slurmdbd mariadbd mariadb-install-db; do
            command -v "$tool" >/dev/null || missing+=("$tool")
        done
    elif [[ $ACCOUNTING != filetxt ]]; then
        die "SLURM_LOCAL_ACCOUNTING=$ACCOUNTING: use auto, dbd or filetxt"
    fi
    ((${#missing[@]} == 0)) || die "missing ${missing[*]}; install: apt-get install -y --no-install-recommends" \
        "slurmctld slurmd slurm-client munge$([[ $ACCOUNTING == dbd ]] && echo ' slurmdbd mariadb-server')"
    getent passwd munge >/dev/null || die "no munge user; reinstall the munge package"
}

start_munge() {
    pid_alive "$DIR/munge/munged.pid" && return 0
    install -d -m 0755 "$DIR/munge"
    chown munge: "$DIR/munge"
    if [[ ! -s $DIR/munge/munge.key ]]; then
        dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
    fi
    chown munge: "$DIR/munge/munge.key"
    chmod 0400 "$DIR/munge/munge.key"
    runuser -u munge -- munged --socket="$MUNGE_SOCKET" --key-file="$DIR/munge/munge.key" \
        --pid-file="$DIR/munge/munged.pid" --seed-file="$DIR/munge/munged.seed" \
        --log-file="$DIR/munge/munged.log"
    wait_for 5 munged test -S "$MUNGE_SOCKET" || die "munged did not start; see $DIR/munge/munged.log"
}

start_mariadb() {
    local db="$DIR/mariadb"
    pid_alive "$db/mariadb.pid" && return 0
    if [[ ! -d $db/data/mysql ]]; then
        install -d -o mysql -g mysql "$db" "$db/data"
        mariadb-install-db --user=mysql --datadir="$db/data" --auth-root-authentication-method=socket \
            --skip-test-db >"$DIR/log/mariadb-install.log" 2>&1 \
            || die "mariadb-install-db failed; see $DIR/log/mariadb-install.log"
    fi
    rm -f "$db/mariadb.sock"  # a socket left by a server that died would pass the wait below
    runuser -u mysql -- mariadbd --no-defaults --datadir="$db/data" --socket="$db/mariadb.sock" \
        --pid-file="$db/mariadb.pid" --port=$((PORT + 3)) --bind-address=127.0.0.1 \
        --log-error="$db/mariadb.err" --innodb-buffer-pool-size=64M >/dev/null 2>&1 &
    wait_for 60 mariadb mariadb-admin --socket="$db/mariadb.sock" -u root --silent ping \
        || die "mariadbd did not start; see $db/mariadb.err"
    mariadb --socket="$db/mariadb.sock" -u root <<'SQL'
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm-local';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
SQL
}

start_slurmdbd() {
    pid_alive "$DIR/run/slurmdbd.pid" && return 0
    cat >"$DIR/etc/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$((PORT + 2))
SlurmUser=root
LogFile=$DIR/log/slurmdbd.log
PidFile=$DIR/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageLoc=slurm_acct_db
StorageUser=slurm
StoragePass=slurm-local
StorageHost=127.0.0.1
StoragePort=$((PORT + 3))
EOF
    chmod 0600 "$DIR/etc/slurmdbd.conf"
    SLURM_CONF=$CONF slurmdbd  # reads slurmdbd.conf beside $SLURM_CONF
    wait_for 20 slurmdbd bash -c "exec 3<>/dev/tcp/127.0.0.1/$((PORT + 2))" \
        || die "slurmdbd did not listen on port $((PORT + 2)); see $DIR/log/slurmdbd.log"
}

write_slurm_conf() {
    local cpus mem_mb
    cpus=$(nproc)
    mem_mb=$(awk '/^MemTotal:/ {printf "%d", $2 * 0.9 / 1024}' /proc/meminfo)
    {
        cat <<EOF
# Written by tests/cluster/slurm-local.sh: one node on localhost, no cgroups.
ClusterName=medvision
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
CredType=cred/munge
StateSaveLocation=$DIR/spool/ctld
SlurmdSpoolDir=$DIR/spool/d
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MailProg=/bin/true
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MinJobAge=600
KillWait=5
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=60
MaxArraySize=10001
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.txt
EOF
        if [[ $ACCOUNTING == dbd ]]; then
            cat <<EOF
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$((PORT + 2))
AccountingStoragePass=$MUNGE_SOCKET
EOF
        fi
        cat <<EOF
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
    } >"$CONF.new"
    mv "$CONF.new" "$CONF"
}

cluster_up() {
    SLURM_CONF=$CONF timeout 5 scontrol ping 2>/dev/null | grep -q UP \
        && pid_alive "$DIR/run/slurmd.pid" \
        && SLURM_CONF=$CONF timeout 5 sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'
}

cmd_up() {
    check_tools
    if [[ -s $CONF ]] && cluster_up; then
        say "already up"
        echo "export SLURM_CONF=$CONF"
        return 0
    fi
    local t0=$SECONDS
    # A half-started or stale cluster: stop what its pid files name, then start clean.
    cmd_down quiet
    install -d -m 0755 "$DIR" "$DIR/etc" "$DIR/run" "$DIR/log" "$DIR/spool/ctld" "$DIR/spool/d"
    start_munge
    if [[ $ACCOUNTING == dbd ]]; then
        start_mariadb
    fi
    write_slurm_conf
    if [[ $ACCOUNTING == dbd ]]; then
        start_slurmdbd
    fi
    export SLURM_CONF=$CONF
    slurmctld -f "$CONF" || die "slurmctld did not start; see $DIR/log/slurmctld.log"
    slurmd -f "$CONF" -N "$NODE" || die "slurmd did not start; see $DIR/log/slurmd.log"
    if [[ $ACCOUNTING == dbd ]]; then
        # the cluster registers itself; add root's association so jobs are accounted
        wait_for 20 "cluster registration" bash -c "sacctmgr -n list cluster format=cluster | grep -q medvision" \
            || sacctmgr -i add cluster medvision >/dev/null
        sacctmgr -i add account medvision cluster=medvision >/dev/null 2>&1 || true
        sacctmgr -i add user root account=medvision cluster=medvision >/dev/null 2>&1 || true
    fi
    wait_for 30 "node idle" bash -c "sinfo -h -o %T | grep -qE '^(idle|mixed|allocated)'" || {
        say "node did not become idle; scontrol says:"
        scontrol show node "$NODE" >&2 || true
        die "see $DIR/log/slurmctld.log and $DIR/log/slurmd.log"
    }
    say "up in $((SECONDS - t0)) s (node $NODE, $(nproc) CPUs, partition $PARTITION, accounting $ACCOUNTING)"
    echo "export SLURM_CONF=$CONF"
}

cmd_down() {
    local quiet=${1:-}
    [[ -d $DIR ]] || { [[ -n $quiet ]] || say "nothing to stop in $DIR"; return 0; }
    stop_pidfile "$DIR/run/slurmd.pid" slurmd
    stop_pidfile "$DIR/run/slurmctld.pid" slurmctld
    stop_pidfile "$DIR/run/slurmdbd.pid" slurmdbd
    stop_pidfile "$DIR/mariadb/mariadb.pid" mariadbd
    stop_pidfile "$DIR/munge/munged.pid" munged
    rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
    [[ -n $quiet ]] || say "down (logs kept in $DIR/log)"
}

case ${1:-} in
    up) cmd_up ;;
    down) cmd_down ;;
    env) [[ -s $CONF ]] && cluster_up || die "not up; run: $0 up"; echo "export SLURM_CONF=$CONF" ;;
    *) echo "usage: $0 up|down|env" >&2; exit 2 ;;
esac
