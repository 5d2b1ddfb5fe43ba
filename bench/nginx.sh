# Sourced by bench/run.sh and bench/callgrind.sh.
# nginx_config NAME WORKERS SERVERS: the config of an nginx of its own under $work (prefix, pid nginx-NAME.pid,
# logs), never the system one; WORKERS is nginx's worker_processes ("auto" or a number).
nginx_config() {
    cat > "$work/nginx-$1.conf" <<EOF_CONF
worker_processes $2;
pid $work/nginx-$1.pid;
error_log $work/logs/nginx-$1.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  client_body_temp_path $work/tmp/body; proxy_temp_path $work/tmp/proxy; fastcgi_temp_path $work/tmp/fastcgi;
  uwsgi_temp_path $work/tmp/uwsgi; scgi_temp_path $work/tmp/scgi;
  $3
}
EOF_CONF
}

# nginx_instance NAME WORKERS SERVERS: that nginx, started (it daemonizes).
nginx_instance() {
    nginx_config "$@"
    nginx -p "$work" -c "$work/nginx-$1.conf" -e "$work/logs/nginx-$1.log"
}
