#!/usr/bin/env bash
# Makes the certificates of a shmap cluster with openssl: a private CA, one
# cluster certificate for the coordinator and the workers, and one client
# certificate for trusted clients that may talk to workers directly.
#
#   scripts/tls_certs.sh DIR [NAME...]
#
# NAME: the host names and IP addresses that clients and peers dial (each
# a subjectAltName of the cluster certificate; "*.svc.example" wildcards are
# fine); default: localhost 127.0.0.1. Writes into DIR (created, mode 700):
#
#   ca.pem ca.key            the CA (keep ca.key offline in production)
#   cluster.pem cluster.key  --tls-cert/--tls-key of the coordinator and
#                            every worker (server and client use)
#   client.pem client.key    --tls-cert/--tls-key of a client allowed to
#                            reach workers directly (client use only)
#
# Everything is valid for SHMAP_CERT_DAYS days (default 365); keys are
# ECDSA P-256, unencrypted (shmap reads them at start). Clients that only
# need the coordinator get ca.pem alone (--tls-ca).
set -euo pipefail

if [ $# -lt 1 ]; then
  sed -n '2,/^set -e/p' "$0" | sed -e 's/^# \{0,1\}//' -e '/^set -e/d' >&2
  exit 2
fi
dir=$1
shift
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(localhost 127.0.0.1)
days=${SHMAP_CERT_DAYS:-365}

san=""
for n in "${names[@]}"; do
  if [[ $n =~ ^[0-9.]+$ || $n == *:* ]]; then
    san+="${san:+,}IP:$n"
  else
    san+="${san:+,}DNS:$n"
  fi
done

mkdir -p "$dir"
chmod 700 "$dir"
cd "$dir"
umask 077

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

# sign NAME CN EXTENSIONS: NAME.csr signed by the CA into NAME.pem
sign() {
  printf '%s\n' "$3" >"$1.ext"
  openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -set_serial "0x$(openssl rand -hex 16)" \
    -days "$days" -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}

key ca.key
openssl req -x509 -new -key ca.key -subj "/CN=shmap cluster CA" -days "$days" -out ca.pem \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"

key cluster.key
sign cluster shmap-cluster "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=$san"

key client.key
sign client shmap-client "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"

chmod 644 ca.pem cluster.pem client.pem
echo "tls_certs: CA, cluster certificate ($san) and client certificate in $PWD"
