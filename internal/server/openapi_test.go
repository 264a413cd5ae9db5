package server_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The OpenAPI document (docs/openapi.json, served at /v1/openapi.json) lists
// exactly the routes the server registers, and its references resolve.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	ts := start(t)
	r := ts.do("GET", "/v1/openapi.json", "", nil)
	onDisk, err := os.ReadFile("../../docs/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if string(r.body) != string(onDisk) {
		t.Fatal("/v1/openapi.json differs from docs/openapi.json")
	}
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi %q", doc.OpenAPI)
	}
	var documented []string
	for path, ops := range doc.Paths {
		for method, op := range ops {
			if method == "parameters" {
				continue
			}
			documented = append(documented, strings.ToUpper(method)+" "+path)
			var o struct {
				Summary   string                     `json:"summary"`
				Responses map[string]json.RawMessage `json:"responses"`
			}
			if err := json.Unmarshal(op, &o); err != nil || o.Summary == "" || len(o.Responses) == 0 {
				t.Errorf("%s %s: no summary or responses (%v)", method, path, err)
			}
		}
	}
	routes := ts.srv.Routes()
	slices.Sort(documented)
	slices.Sort(routes)
	for _, r := range routes {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is not in docs/openapi.json", r)
		}
	}
	for _, d := range documented {
		if !slices.Contains(routes, d) {
			t.Errorf("docs/openapi.json has %s, which the server does not serve", d)
		}
	}
	var all map[string]any
	_ = json.Unmarshal(r.body, &all)
	schemas := all["components"].(map[string]any)["schemas"].(map[string]any)
	for _, m := range regexp.MustCompile(`"\$ref": ?"#/components/schemas/([^"]+)"`).FindAllStringSubmatch(string(r.body), -1) {
		if _, ok := schemas[m[1]]; !ok {
			t.Errorf("$ref to missing schema %s", m[1])
		}
	}
}
