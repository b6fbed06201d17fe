#!/bin/sh
# The classroom hub's TLS certificate, made at install time (deploy/README.md):
#   sh deploy/certificate.sh [FOLDER [NAME ...]]
# writes FOLDER/hub.key (readable by root only) and FOLDER/hub.crt, a self-signed certificate for
# this machine's names and addresses and the NAMEs given (e.g. hub.example.org). FOLDER defaults
# to $TFCOURSE_HUB_STATE/tls (/srv/jupyterhub/tls), where jupyterhub_config.py looks for them.
#
# A pair already there is kept: replace it with a certificate a browser trusts (Let's Encrypt's
# fullchain.pem and privkey.pem) by copying it over these two files, or by pointing
# TFCOURSE_SSL_CERT and TFCOURSE_SSL_KEY at it. A self-signed certificate still encrypts every
# login; browsers warn about it once, and the fingerprint printed below is what learners compare.
set -eu
FOLDER=${1:-${TFCOURSE_HUB_STATE:-/srv/jupyterhub}/tls}
[ $# -gt 0 ] && shift
if [ -e "$FOLDER/hub.crt" ] || [ -e "$FOLDER/hub.key" ]; then
    echo "$FOLDER already holds a certificate or key: kept (delete both to make new ones)"
    exit 0
fi

# Every name and address learners may type: this machine's, loopback (a trial), and those given.
names="DNS:localhost,IP:127.0.0.1,IP:::1"
for name in "$(hostname)" "$(hostname -f 2>/dev/null || true)" "$@"; do
    [ -n "$name" ] && case ",$names," in *",DNS:$name,"*) ;; *) names="$names,DNS:$name" ;; esac
done
for address in $(hostname -I 2>/dev/null || true); do
    case ",$names," in *",IP:$address,"*) ;; *) names="$names,IP:$address" ;; esac
done

mkdir -p "$FOLDER"
chmod 700 "$FOLDER"
umask 077
openssl req -x509 -newkey rsa:3072 -sha256 -nodes -days 825 \
    -subj "/CN=$(hostname)/O=tfcourse classroom" -addext "subjectAltName=$names" \
    -keyout "$FOLDER/hub.key" -out "$FOLDER/hub.crt" 2>/dev/null
chmod 600 "$FOLDER/hub.key"
chmod 644 "$FOLDER/hub.crt"
echo "self-signed certificate for $names:"
echo "  $FOLDER/hub.crt, key $FOLDER/hub.key"
openssl x509 -in "$FOLDER/hub.crt" -noout -fingerprint -sha256
