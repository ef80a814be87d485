package main

// What a reader beside the proxy needs of Tink's format, written here from
// docs/FORMAT.md with Go's own AES-GCM: a cleartext JSON keyset's enabled
// keys, the associated data of a value (TopicAndKey) and a key (Topic), and a
// value's decryption. Record keys (AES-SIV, which Go's standard library
// lacks) are checked by their shape: the version byte, the key keyset's key
// id, 21 bytes more than the plaintext.

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
)

// keyset holds the enabled keys of a keyset file by id, and the primary's id.
type keyset struct {
	primary uint32
	keys    map[uint32][]byte
}

// older returns the enabled key ids other than the primary: the older keys
// of a rotation.
func (k keyset) older() map[uint32]bool {
	out := map[uint32]bool{}
	for id := range k.keys {
		if id != k.primary {
			out[id] = true
		}
	}
	return out
}

// readKeyset reads a Tink cleartext JSON keyset. The key material is the
// serialized key proto: [08 00 (version 0)] then field 3 (0x1a LEN key) for
// AES-GCM, field 2 (0x12 LEN key) for AES-SIV; the bytes after the tag and
// length are the key.
func readKeyset(path string) (keyset, error) {
	var file struct {
		PrimaryKeyID uint32 `json:"primaryKeyId"`
		Key          []struct {
			KeyData struct {
				Value string `json:"value"`
			} `json:"keyData"`
			Status string `json:"status"`
			KeyID  uint32 `json:"keyId"`
		} `json:"key"`
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return keyset{}, err
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		return keyset{}, fmt.Errorf("%s: %w", path, err)
	}
	ks := keyset{primary: file.PrimaryKeyID, keys: map[uint32][]byte{}}
	for _, k := range file.Key {
		if k.Status != "ENABLED" {
			continue
		}
		proto, err := base64.StdEncoding.DecodeString(k.KeyData.Value)
		if err != nil {
			return keyset{}, err
		}
		i := 0
		if proto[0] == 0x08 {
			i = 2
		}
		n := int(proto[i+1])
		ks.keys[k.KeyID] = proto[i+2 : i+2+n]
	}
	return ks, nil
}

func u32(n int) []byte {
	return binary.BigEndian.AppendUint32(nil, uint32(n))
}

// topicAd is the Topic associated data: u32be(len) | topic | 0x00.
func topicAd(topic string) []byte {
	out := append(u32(len(topic)), topic...)
	return append(out, 0)
}

// valueAd is a value's associated data: TopicAndKey, or Topic for a record
// without a key.
func valueAd(topic string, key []byte) []byte {
	if key == nil {
		return topicAd(topic)
	}
	out := append(u32(len(topic)), topic...)
	out = append(out, 1)
	out = append(out, u32(len(key))...)
	return append(out, key...)
}

// keyID is the key id of a ciphertext (bytes 1..5, after the version byte).
func keyID(ct []byte) uint32 {
	return binary.BigEndian.Uint32(ct[1:5])
}

// decrypt opens 0x01 | key id | nonce (12) | ciphertext | tag (16).
func decrypt(ks keyset, ct, ad []byte) ([]byte, error) {
	if len(ct) < 33 || ct[0] != 1 {
		return nil, errors.New("not a ciphertext")
	}
	key, ok := ks.keys[keyID(ct)]
	if !ok {
		return nil, fmt.Errorf("unknown key id %d", keyID(ct))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return gcm.Open(nil, ct[5:17], ct[17:], ad)
}
