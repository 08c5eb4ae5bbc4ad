#!/usr/bin/env bash
# Run a real single-node Apache Kafka broker (KRaft, combined broker+controller)
# on 127.0.0.1 as a plain Java process, for integration tests and benchmarks.
# Jars come from Maven Central via mvn (no tarball download needed).
set -euo pipefail

KAFKA_VERSION=4.3.1
LOG4J_VERSION=2.25.4 # same log4j-core that kafka-server 4.3.1 already pulls in
CACHE=${FERROKAFKA_CACHE:-$HOME/.cache/ferrokafka}
KAFKA_HOME=$CACHE/kafka-$KAFKA_VERSION
LIBS=$KAFKA_HOME/libs
STAMP=$KAFKA_HOME/.complete
STATE_DIR=${FERROKAFKA_STATE:-$CACHE/run}
PORT=${KAFKA_PORT:-9092}
CPORT=${KAFKA_CONTROLLER_PORT:-$((PORT + 1))}
PID_FILE=$STATE_DIR/$PORT.pid
STATE_FILE=$STATE_DIR/$PORT.state
SECURE_USER=ferrokafka
SECURE_PASSWORD=ferrokafka-test-secret # a throwaway test broker's, printed on purpose
JAVA_OPTS=(-Dlog4j2.configurationFile="$KAFKA_HOME/log4j2.xml" -Djava.awt.headless=true)

log() { printf 'kafka.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
  cat >&2 <<EOF
usage: $(basename "$0") {start|stop|status|fetch|pause|resume|freeze|thaw}
  fetch   resolve Kafka $KAFKA_VERSION jars into $LIBS (once)
  start   start a broker on 127.0.0.1:\$KAFKA_PORT, print bootstrap address on stdout
  stop    stop the broker this script started on \$KAFKA_PORT and delete its data
  status  print running/stopped (exit 0 if running, 3 if not)
  pause   stop the broker but keep its data (an outage); resume starts it again
  freeze  stop the broker's process with SIGSTOP (a hung broker: connections are accepted and
          nothing answers); thaw continues it
env: KAFKA_PORT (9092) KAFKA_CONTROLLER_PORT (port+1) KAFKA_HEAP_OPTS (-Xms512m -Xmx512m)
     FERROKAFKA_CACHE (~/.cache/ferrokafka) FERROKAFKA_STATE (\$cache/run)
     KAFKA_SECURITY=1 (start only): also listen with TLS, for tests of secured clusters:
       SSL on port+2 and SASL_SSL on port+3 (mechanisms SCRAM-SHA-512, PLAIN, OAUTHBEARER with
       Kafka's unsecured-token validator; user $SECURE_USER, password $SECURE_PASSWORD). A throwaway CA
       and a broker certificate for 127.0.0.1 are made with openssl in the data dir; start prints
       ssl=, sasl_ssl=, ca= (the CA to verify with), untrusted_ca= (one that signed nothing),
       user= and password= lines before the bootstrap line.
     KAFKA_AUTO_CREATE_TOPICS (true; start only): the broker's auto.create.topics.enable.
     KAFKA_START_TIMEOUT (180; start and resume): seconds the broker gets to answer.
EOF
}

fetch() {
  [[ -f $STAMP ]] && return 0 # fast path: no Maven at all
  command -v mvn >/dev/null || die "mvn not found (needed once to fetch Kafka jars)"
  mkdir -p "$KAFKA_HOME"
  # Parallel starts on different ports must not fetch into the same dir at once.
  exec 9>"$KAFKA_HOME/.lock" && flock 9
  if [[ -f $STAMP ]]; then exec 9>&-; return 0; fi
  local stage=$KAFKA_HOME/.staging.$$
  rm -rf "$stage" && mkdir -p "$stage"
  # kafka_2.13 ships no logging backend; its slf4j-api is 1.7.x, so the bridge
  # is log4j-slf4j-impl (not the slf4j2 one). kafka-tools has ProducerPerformance.
  cat >"$stage/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.ferrokafka</groupId><artifactId>kafka-jars</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>$LOG4J_VERSION</version></dependency>
  </dependencies>
</project>
EOF
  log "fetching Kafka $KAFKA_VERSION jars with Maven into $LIBS (first run only)..."
  # Maven's output goes to a file (it is noisy even with -q); shown only on failure.
  if ! mvn -B -f "$stage/pom.xml" dependency:copy-dependencies \
    -DoutputDirectory="$stage/libs" -DincludeScope=runtime >"$stage/mvn.log" 2>&1; then
    tail -n 40 "$stage/mvn.log" >&2
    rm -rf "$stage"
    die "Maven could not resolve Kafka $KAFKA_VERSION jars"
  fi
  rm -rf "$LIBS" && mv "$stage/libs" "$LIBS" && rm -rf "$stage"
  # Everything goes to stdout, which start redirects into the data dir's log file,
  # so JVM crash output and broker logs end up in one place.
  cat >"$KAFKA_HOME/log4j2.xml" <<'EOF'
<Configuration status="WARN">
  <Appenders><Console name="out" target="SYSTEM_OUT"><PatternLayout pattern="[%d] %p %m (%c)%n"/></Console></Appenders>
  <Loggers>
    <Root level="INFO"><AppenderRef ref="out"/></Root>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="state.change.logger" level="WARN"/>
    <Logger name="kafka.log.LogCleaner" level="WARN"/>
    <Logger name="org.apache.kafka.storage" level="WARN"/>
    <Logger name="org.apache.kafka.common.config.AbstractConfig" level="WARN"/>
  </Loggers>
</Configuration>
EOF
  date -u +%FT%TZ >"$STAMP"
  exec 9>&-
  log "fetched $(find "$LIBS" -name '*.jar' | wc -l) jars"
}

# A live Kafka JVM, not just a live pid: guards against pid reuse, and a zombie's cmdline is empty.
alive() { kill -0 "$1" 2>/dev/null && grep -qa 'kafka\.Kafka' "/proc/$1/cmdline" 2>/dev/null; }

running_pid() {
  local pid
  [[ -f $PID_FILE ]] && pid=$(<"$PID_FILE") && [[ $pid =~ ^[0-9]+$ ]] && alive "$pid" || return 1
  echo "$pid"
}

state_get() { sed -n "s/^$1=//p" "$STATE_FILE" 2>/dev/null || true; }

# Prints the first given port that cannot be bound on 127.0.0.1. SO_REUSEADDR so that
# TIME_WAIT sockets left by our own previous broker don't count as taken.
busy_port() {
  python3 -c 'import socket, sys
for p in sys.argv[1:]:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try: s.bind(("127.0.0.1", int(p)))
        except OSError: print(p); break' "$@"
}

# Polls every 0.2 s until the broker answers a real Kafka MetadataRequest listing >= 1 broker.
# One python process for the whole wait: a pyenv shim alone costs ~0.2 s per python3 call.
# Exit 2: the JVM died; 3: timeout.
wait_ready() {
  python3 - "$PORT" "$1" "$2" <<'PY'
import socket, struct, sys, time
port, pid, deadline = int(sys.argv[1]), sys.argv[2], time.monotonic() + float(sys.argv[3])
# Header v1: api_key 3 (Metadata), api_version 1, correlation_id 7, client_id. Body: topics = null (all).
req = struct.pack(">hhih", 3, 1, 7, 8) + b"kafka.sh" + struct.pack(">i", -1)

def brokers_listed():
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s, s.makefile("rb") as f:
            s.sendall(struct.pack(">i", len(req)) + req)
            # Response v1: int32 size, correlation_id, then the brokers array length.
            size, corr, nbrokers = struct.unpack(">iii", f.read(12))
            return size >= 8 and corr == 7 and nbrokers >= 1
    except (OSError, struct.error):  # refused / reset / short read while starting up
        return False

def dead():  # a zombie counts as dead
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True

while time.monotonic() < deadline:
    if brokers_listed():
        sys.exit(0)
    if dead():
        sys.exit(2)
    time.sleep(0.2)
sys.exit(3)
PY
}

cleanup_state() {
  local data
  data=$(state_get data_dir)
  # Only ever delete a dir that looks like one start created.
  if [[ -n $data && -d $data && $(basename "$data") == ferrokafka-"$PORT".* ]]; then rm -rf "$data"; fi
  rm -f "$PID_FILE" "$STATE_FILE"
}

# KAFKA_SECURITY=1: a throwaway CA, a broker certificate for 127.0.0.1 signed by it and a second CA
# that signed nothing, in $1/tls; prints the server.properties lines of the SSL and SASL_SSL
# listeners. The PLAINTEXT listener stays the inter-broker one, so nothing else changes.
security_properties() {
  local tls=$1/tls ssl_port=$((PORT + 2)) sasl_port=$((PORT + 3))
  command -v openssl >/dev/null || die "openssl not found (needed for KAFKA_SECURITY=1)"
  mkdir -p "$tls"
  (
    cd "$tls"
    for ca in ca untrusted-ca; do
      openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=ferrokafka test $ca" \
        -keyout "$ca.key" -out "$ca.pem" 2>/dev/null
    done
    openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout broker.key -out broker.csr 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >broker.ext
    openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
      -extfile broker.ext -out broker.crt 2>/dev/null
    # Kafka's PEM key store: an unencrypted PKCS#8 key followed by the certificate chain.
    cat broker.key broker.crt ca.pem >broker-keystore.pem
  ) || die "could not make the test certificates in $tls"
  printf 'ssl=127.0.0.1:%s\nsasl_ssl=127.0.0.1:%s\nca=%s\nuntrusted_ca=%s\nuser=%s\npassword=%s\n' \
    "$ssl_port" "$sasl_port" "$tls/ca.pem" "$tls/untrusted-ca.pem" "$SECURE_USER" "$SECURE_PASSWORD" >"$1/security.env"
  cat <<EOF
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CPORT,SSL://127.0.0.1:$ssl_port,SASL_SSL://127.0.0.1:$sasl_port
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CPORT,SSL://127.0.0.1:$ssl_port,SASL_SSL://127.0.0.1:$sasl_port
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL
ssl.keystore.type=PEM
ssl.keystore.location=$tls/broker-keystore.pem
sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN,OAUTHBEARER
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$SECURE_USER="$SECURE_PASSWORD";
listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;
listener.name.sasl_ssl.oauthbearer.sasl.server.callback.handler.class=org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler
EOF
}

# The client settings of a KAFKA_SECURITY=1 broker, printed before its bootstrap line.
print_security() {
  local data
  data=$(state_get data_dir)
  if [[ -n $data && -f $data/security.env ]]; then cat "$data/security.env"; fi
}

# Starts the JVM on an already formatted data dir and waits until it answers.
launch() {
  local data=$1 pid rc=0
  # Word splitting of the *_OPTS overrides is intended (they are lists of JVM flags).
  # shellcheck disable=SC2086
  nohup java ${KAFKA_HEAP_OPTS:--Xms512m -Xmx512m} \
    ${KAFKA_JVM_PERFORMANCE_OPTS:--XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35} \
    "${JAVA_OPTS[@]}" -cp "$LIBS/*" kafka.Kafka "$data/server.properties" \
    >>"$data/kafka.log" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$PID_FILE"
  log "broker pid $pid starting on 127.0.0.1:$PORT (controller $CPORT), log $data/kafka.log"
  # A ready broker answers in seconds; the bound is for a machine busy with other builds (a
  # JVM starting at load 30 on two cores took over a minute), where failing early fails CI.
  local bound=${KAFKA_START_TIMEOUT:-180}
  wait_ready "$pid" "$bound" || rc=$?
  if ((rc != 0)); then
    log "broker $( ((rc == 2)) && echo exited || echo "not ready after $bound s"); last log lines:"
    tail -n 40 "$data/kafka.log" >&2
    stop >/dev/null 2>&1 || true
    die "Kafka broker failed to start on 127.0.0.1:$PORT"
  fi
  log "broker ready"
  print_security
  echo "127.0.0.1:$PORT"
}

start() {
  local pid data busy cluster_id scram=()
  fetch
  mkdir -p "$STATE_DIR"
  if pid=$(running_pid); then log "broker already running (pid $pid)"; print_security; echo "127.0.0.1:$PORT"; return 0; fi
  cleanup_state # leftovers of a broker that died without stop
  local ports=("$PORT" "$CPORT")
  [[ ${KAFKA_SECURITY:-} != 1 ]] || ports+=($((PORT + 2)) $((PORT + 3)))
  busy=$(busy_port "${ports[@]}")
  [[ $busy != "$PORT" ]] || die "port $PORT on 127.0.0.1 is already in use by another process (set KAFKA_PORT)"
  [[ $busy != "$CPORT" ]] || die "controller port $CPORT on 127.0.0.1 is already in use (set KAFKA_CONTROLLER_PORT)"
  [[ -z $busy ]] || die "port $busy on 127.0.0.1 (a KAFKA_SECURITY listener) is already in use"
  data=$(mktemp -d "${TMPDIR:-/tmp}/ferrokafka-$PORT.XXXXXX")
  printf 'port=%s\ncontroller_port=%s\ndata_dir=%s\n' "$PORT" "$CPORT" "$data" >"$STATE_FILE"
  # controller.quorum.bootstrap.servers (dynamic quorum) is what `format --standalone` expects;
  # it is mutually exclusive with controller.quorum.voters.
  cat >"$data/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$CPORT
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CPORT
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CPORT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
log.dirs=$data/kraft-logs
num.partitions=3
auto.create.topics.enable=${KAFKA_AUTO_CREATE_TOPICS:-true}
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
min.insync.replicas=1
group.initial.rebalance.delay.ms=0
group.share.min.record.lock.duration.ms=1000
group.share.heartbeat.interval.ms=500
group.share.min.heartbeat.interval.ms=500
group.share.session.timeout.ms=6000
group.share.min.session.timeout.ms=1000
EOF
  # Share groups (KIP-932) are on by default since Kafka 4.2 (share.version=1 at format time);
  # the group.share.* lines above only shorten times for tests: 1 s record locks allowed, a 0.5 s
  # share heartbeat (first records without a 5 s wait) and a 6 s session like the consumer
  # tests' (a killed member's partitions move on within seconds, not 45).
  if [[ ${KAFKA_SECURITY:-} == 1 ]]; then
    # Later keys win in a properties file, so these listeners replace the ones above.
    security_properties "$data" >>"$data/server.properties"
    # KRaft keeps SCRAM credentials in the metadata log: they are written at format time.
    scram=(--add-scram "SCRAM-SHA-512=[name=$SECURE_USER,password=$SECURE_PASSWORD]")
  fi
  # Kafka cluster ids are 16 random bytes, base64url without padding; a leading '-'
  # would be parsed as a CLI flag, so retry (Kafka's own Uuid.randomUuid does the same).
  cluster_id=-
  while [[ $cluster_id == -* ]]; do
    cluster_id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
  done
  log "formatting storage in $data (cluster id $cluster_id)"
  if ! java -Xmx256m -XX:TieredStopAtLevel=1 "${JAVA_OPTS[@]}" -cp "$LIBS/*" kafka.tools.StorageTool \
    format --standalone -t "$cluster_id" -c "$data/server.properties" "${scram[@]}" >"$data/kafka.log" 2>&1; then
    tail -n 30 "$data/kafka.log" >&2
    cleanup_state
    die "storage format failed"
  fi
  launch "$data"
}

# SIGTERM (controlled shutdown), then SIGKILL after 30 s.
terminate() {
  local pid=$1 i
  log "stopping broker pid $pid"
  kill -TERM "$pid" 2>/dev/null || true
  kill -CONT "$pid" 2>/dev/null || true # a frozen broker handles the SIGTERM once continued
  for ((i = 0; i < 150; i++)); do alive "$pid" || break; sleep 0.2; done
  if alive "$pid"; then
    log "broker ignored SIGTERM for 30 s, sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    while alive "$pid"; do sleep 0.2; done
  fi
}

stop() {
  local pid
  if pid=$(running_pid); then terminate "$pid"; fi
  cleanup_state
  log "stopped (port $PORT)"
}

# Stops the broker but keeps its data and state, so `resume` brings the same cluster back:
# an outage, for tests of what clients do while no broker answers.
pause() {
  local pid
  pid=$(running_pid) || die "no broker of ours is running on port $PORT"
  terminate "$pid"
  rm -f "$PID_FILE"
  log "paused (port $PORT); data kept in $(state_get data_dir)"
}

resume() {
  local pid data
  if pid=$(running_pid); then log "broker already running (pid $pid)"; print_security; echo "127.0.0.1:$PORT"; return 0; fi
  data=$(state_get data_dir)
  [[ -n $data && -f $data/server.properties ]] || die "no paused broker on port $PORT"
  launch "$data"
}

# A hung broker, unlike a stopped one: the kernel still accepts connections and takes requests,
# and no answer comes, so clients wait for their own timeouts instead of failing at once.
freeze() {
  local pid
  pid=$(running_pid) || die "no broker of ours is running on port $PORT"
  kill -STOP "$pid"
  log "frozen (port $PORT, pid $pid)"
}

# Returns once the broker answers again (lists itself in a metadata answer), as resume does:
# a test that goes on at once may meet a broker still catching up on the time it lost.
thaw() {
  local pid
  pid=$(running_pid) || die "no broker of ours is running on port $PORT"
  kill -CONT "$pid"
  wait_ready "$pid" 60 || die "broker on port $PORT not answering 60 s after thaw"
  log "thawed (port $PORT, pid $pid)"
}

status() {
  local pid
  pid=$(running_pid) || { echo "stopped (port $PORT)"; return 3; }
  echo "running pid=$pid bootstrap=127.0.0.1:$PORT data_dir=$(state_get data_dir)"
}

[[ $PORT =~ ^[0-9]+$ && $CPORT =~ ^[0-9]+$ ]] || die "KAFKA_PORT/KAFKA_CONTROLLER_PORT must be numbers"
case "${1:-}" in
  fetch) fetch ;;
  start) start ;;
  stop) stop ;;
  pause) pause ;;
  resume) resume ;;
  freeze) freeze ;;
  thaw) thaw ;;
  status) status ;;
  -h | --help | help) usage ;;
  *) usage; exit 2 ;;
esac
