#!/usr/bin/env bash
# Remakes the fixed test certificates of the TLS tests (proxy/tests/tls.rs):
# a CA, and a certificate it signs for localhost and 127.0.0.1, both EC
# P-256, valid for 100 years. Test material only: the keys are public.
set -euo pipefail
cd "$(dirname "$0")"
days=36500
openssl ecparam -name prime256v1 -genkey -noout -out ca.key
openssl req -x509 -new -key ca.key -sha256 -days "$days" -subj "/CN=tombstone-crypt test CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
  -out ca.pem
openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 -nocrypt -out server.key
openssl req -new -key server.key -subj "/CN=localhost" -out server.csr
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n' > server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days "$days" -sha256 \
  -extfile server.ext -out server.pem
rm -f server.csr server.ext ca.srl
# The CA key is not kept: the tests need only the certificates.
# A second CA that signed nothing: a client that trusts it must refuse the proxy.
openssl ecparam -name prime256v1 -genkey -noout -out other-ca.key
openssl req -x509 -new -key other-ca.key -sha256 -days "$days" -subj "/CN=tombstone-crypt other CA" \
  -addext "basicConstraints=critical,CA:TRUE" -out other-ca.pem
rm -f other-ca.key ca.key
