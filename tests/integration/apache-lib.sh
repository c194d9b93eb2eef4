# shellcheck shell=bash
# The Apache configuration shared by the apache test (apache.sh) and the
# same-host benchmark (scripts/bench-same-host); sourced after lib.sh. Not a
# test by itself.
#
#   apache_conf FILE DIR PORT MAXKA
#       write to FILE a minimal configuration for Debian's apache2: the
#       event MPM (its listener thread and 2 processes of 25 workers, a
#       fixed pool: no process is started or stopped while it runs),
#       KeepAlive on with MaxKeepAliveRequests MAXKA (0: unlimited),
#       EnableSendfile on, Listen 127.0.0.1:PORT, DocumentRoot DIR/www,
#       pid file, error log (DIR/apache-error.log) and runtime files in DIR,
#       no access log. Started as root, apache serves as www-data (it
#       refuses to serve as root): the caller makes DIR/www readable and
#       the shim's stats file writable for that user. Started as another
#       user, it serves as that user (User/Group are then ignored).
#   APACHE         the command that runs it in the foreground with the real
#                  event MPM (-DFOREGROUND, not the single-process -X):
#                  "${APACHE[@]}" -f FILE
APACHE_MODULES=/usr/lib/apache2/modules
# shellcheck disable=SC2034 # used by the scripts that source this one
APACHE=(apache2 -DFOREGROUND)

apache_conf() {
  local file=$1 dir=$2 port=$3 maxka=$4 user=""
  [[ -f $APACHE_MODULES/mod_mpm_event.so ]] ||
    fail "no $APACHE_MODULES/mod_mpm_event.so (Debian's apache2 package)"
  [[ $(id -u) == 0 ]] && user="User www-data
Group www-data"
  cat >"$file" <<EOF
ServerRoot $dir
ServerName 127.0.0.1
Listen 127.0.0.1:$port
PidFile $dir/apache.pid
DefaultRuntimeDir $dir
ErrorLog $dir/apache-error.log
LogLevel warn
LoadModule mpm_event_module $APACHE_MODULES/mod_mpm_event.so
LoadModule authz_core_module $APACHE_MODULES/mod_authz_core.so
$user
StartServers 2
ServerLimit 2
ThreadsPerChild 25
MaxRequestWorkers 50
MinSpareThreads 25
MaxSpareThreads 50
MaxConnectionsPerChild 0
KeepAlive On
MaxKeepAliveRequests $maxka
KeepAliveTimeout 5
EnableSendfile On
DocumentRoot $dir/www
<Directory />
  Require all denied
  AllowOverride None
</Directory>
<Directory $dir/www>
  Require all granted
</Directory>
EOF
}
