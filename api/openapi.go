package api

import _ "embed"

// OpenAPI is the OpenAPI 3.1 document of the typed HTTP API, served at
// GET /v1/openapi.json. It is generated from these types by
// LEASEWAL_UPDATE_GOLDEN=1 go test ./api, and a test fails while it differs
// from what they say.
//
//go:embed openapi.json
var OpenAPI []byte
