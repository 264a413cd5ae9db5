// Package docs holds the documentation files that the sluice command
// serves: the OpenAPI document of "sluice server" (openapi.json).
package docs

import _ "embed"

// OpenAPI is docs/openapi.json, the OpenAPI 3.1 document of the HTTP API.
//
//go:embed openapi.json
var OpenAPI []byte
