// Command check reads manifests (helm template's output) on stdin and decodes each one
// strictly against the Kubernetes API's types (k8s.io/api, through client-go's scheme): an
// unknown kind or apiVersion, an unknown or misspelt field, a value of the wrong type or a
// field given twice is an error naming the document. It prints one line per object
// ("Deployment/sluice"), or with -json each object as the API server would read it (one JSON
// document per line), and exits 1 on the first error. The types are those the API server's
// OpenAPI schemas are generated from.
package main

import (
	"bufio"
	"bytes"
	encjson "encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/client-go/kubernetes/scheme"
)

func main() {
	asJSON := flag.Bool("json", false, "print each object as JSON, one per line")
	flag.Parse()
	in, err := io.ReadAll(bufio.NewReader(os.Stdin))
	if err != nil {
		fmt.Fprintln(os.Stderr, "check:", err)
		os.Exit(1)
	}
	strict := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
		json.SerializerOptions{Yaml: true, Strict: true})
	n := 0
	for i, doc := range bytes.Split(in, []byte("\n---")) {
		text := strings.TrimSpace(string(doc))
		source := ""
		if rest, ok := strings.CutPrefix(text, "# Source: "); ok {
			source, _, _ = strings.Cut(rest, "\n")
		}
		if !hasContent(text) {
			continue
		}
		obj, gvk, err := strict.Decode([]byte(text), nil, nil)
		if err != nil {
			fmt.Fprintf(os.Stderr, "check: document %d (%s): %v\n", i+1, source, err)
			os.Exit(1)
		}
		if _, ok := obj.(*unstructured.Unstructured); ok {
			fmt.Fprintf(os.Stderr, "check: document %d (%s): %s is not a built-in kind\n", i+1, source, gvk)
			os.Exit(1)
		}
		name := ""
		if m, ok := obj.(interface{ GetName() string }); ok {
			name = m.GetName()
		}
		if *asJSON {
			out, err := encjson.Marshal(obj)
			if err != nil {
				fmt.Fprintf(os.Stderr, "check: document %d (%s): %v\n", i+1, source, err)
				os.Exit(1)
			}
			// Typed objects do not carry their kind: put it back.
			var m map[string]any
			_ = encjson.Unmarshal(out, &m)
			m["kind"] = gvk.Kind
			m["apiVersion"] = gvk.GroupVersion().String()
			out, _ = encjson.Marshal(m)
			fmt.Println(string(out))
		} else {
			fmt.Printf("%s/%s (%s)\n", gvk.Kind, name, gvk.GroupVersion())
		}
		n++
	}
	if n == 0 {
		fmt.Fprintln(os.Stderr, "check: no manifest on stdin")
		os.Exit(1)
	}
}

// hasContent: a document with more than comments and blank lines.
func hasContent(doc string) bool {
	for _, l := range strings.Split(doc, "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") {
			return true
		}
	}
	return false
}
