#!/usr/bin/env bash
# shellcheck disable=SC2016 # the sh -c script takes its arguments as "$@"
# TLS (OpenSSL's s_server and s_client) moving a 32 MiB random file each way,
# both ends under the shim. The shim sees only ciphertext: the handshake's
# records, then the application's, in whatever sizes OpenSSL writes them.
# Under R2SOCK_UPGRADE=now the switch lands inside the TLS handshake, so a
# byte lost, doubled or moved there fails the handshake or a record's MAC,
# and either end exits with an error, before the bytes are compared.
#   Download: s_server -WWW serves the file (an HTTP/1.0 GET through
#   s_client: the body after the response's header must be the file).
#   Plain s_server sending its standard input was tried first and hangs
#   without the shim too: most runs stop after 16 KiB (OpenSSL 3.0.x).
#   Upload: s_client sends its standard input and ends at its end
#   (-no_ign_eof, given after -quiet, which implies the opposite);
#   s_server writes what it receives and exits when the connection closes
#   (-naccept 1). -nocommands keeps s_client from taking lines of the
#   random file that begin with Q, R or K for commands.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
need openssl

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
  -keyout "$TMP/key.pem" -out "$TMP/cert.pem" 2>"$TMP/req.log" || fail "openssl req: $(tail -n 3 "$TMP/req.log")"
random_file "$TMP/in" 32M
size=$(file_size "$TMP/in")
server_opts=(-cert "$TMP/cert.pem" -key "$TMP/key.pem" -quiet -naccept 1)
client_opts=(-quiet -nocommands -verify_return_error -CAfile "$TMP/cert.pem" -verify_hostname localhost)

# Download. -WWW serves paths relative to the server's directory.
cd "$TMP"
port=$(free_port)
start_server tls-send "$port" openssl s_server -accept "127.0.0.1:$port" -WWW "${server_opts[@]}"
printf 'GET /in HTTP/1.0\r\n\r\n' >"$TMP/get"
run 60 openssl s_client -connect "127.0.0.1:$port" "${client_opts[@]}" <"$TMP/get" >"$TMP/down.http"
wait_server tls-send
# The header ends at the first empty line; read leaves the file just past it.
{
  IFS= read -r status
  while IFS= read -r line && [[ $line != $'\r' ]]; do :; done
  cat >"$TMP/down"
} <"$TMP/down.http"
[[ $status == $'HTTP/1.0 200 ok\r' ]] ||
  fail "download: expected the status line 'HTTP/1.0 200 ok', got '${status%$'\r'}'"
same_file "$TMP/in" "$TMP/down"

# Upload. The server's standard input is a FIFO this shell holds open: at
# the end of its input s_server would close the connection.
mkfifo "$TMP/hold"
exec 3<>"$TMP/hold"
port=$(free_port)
start_server tls-recv "$port" sh -c 'exec openssl s_server "$@" <hold >up' sh -accept "127.0.0.1:$port" \
  "${server_opts[@]}"
run 60 openssl s_client -connect "127.0.0.1:$port" "${client_opts[@]}" -no_ign_eof <"$TMP/in" >/dev/null
wait_server tls-recv
exec 3>&-
same_file "$TMP/in" "$TMP/up"
log "moved 2 x $size bytes byte-exact through TLS"

check_stats conns=4 bulk=4 bytes=$((2 * size)) procs=4
log PASS
