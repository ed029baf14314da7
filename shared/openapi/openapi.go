// Package openapi holds Rally's OpenAPI 3.1 document: the contract the local
// stack serves at /openapi.json and every integration test validates its
// responses against.
package openapi

import _ "embed"

//go:embed openapi.json
var document []byte

// JSON returns the OpenAPI document.
func JSON() []byte { return document }
