// Renders a Helm chart's templates as `helm template` does, for a machine without Helm:
// Go's text/template with the sprig functions (the engine and function library Helm
// uses) and Helm's own additions the chart needs (include, required, toYaml), values from
// values.yaml deep-merged with -f files, .Release, .Chart and .Template. It refuses what
// it does not implement (an unknown function fails the parse), so a chart that renders
// here uses only what Helm itself provides.
//
//	go run . [-f values.yaml]... [-name RELEASE] [-namespace NS] CHART_DIR
//
// Built by .ci/helm-check with Debian's golang-go and golang-github-masterminds-sprig-dev.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig/v3"
	"gopkg.in/yaml.v2"
)

type files []string

func (f *files) String() string     { return strings.Join(*f, ",") }
func (f *files) Set(v string) error { *f = append(*f, v); return nil }

// normalize turns yaml.v2's map[interface{}]interface{} into map[string]interface{}, as
// Helm's values are (they go through JSON).
func normalize(v interface{}) interface{} {
	switch t := v.(type) {
	case map[interface{}]interface{}:
		out := make(map[string]interface{}, len(t))
		for k, val := range t {
			out[fmt.Sprint(k)] = normalize(val)
		}
		return out
	case []interface{}:
		for i := range t {
			t[i] = normalize(t[i])
		}
		return t
	default:
		return v
	}
}

func load(path string) (map[string]interface{}, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var v interface{}
	if err := yaml.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if v == nil {
		return map[string]interface{}{}, nil
	}
	m, ok := normalize(v).(map[string]interface{})
	if !ok {
		return nil, fmt.Errorf("%s: not a map", path)
	}
	return m, nil
}

// merge deep-merges src over dst (maps merge, everything else replaces), as Helm does
// with -f files.
func merge(dst, src map[string]interface{}) map[string]interface{} {
	for k, v := range src {
		if sm, ok := v.(map[string]interface{}); ok {
			if dm, ok := dst[k].(map[string]interface{}); ok {
				dst[k] = merge(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
	return dst
}

func toYaml(v interface{}) string {
	out, err := yaml.Marshal(v)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(out), "\n")
}

func main() {
	var valueFiles files
	flag.Var(&valueFiles, "f", "a values file, over values.yaml (repeatable)")
	name := flag.String("name", "hookd", "the release's name")
	namespace := flag.String("namespace", "default", "the release's namespace")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: render [-f values.yaml]... [-name NAME] [-namespace NS] CHART_DIR")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), valueFiles, *name, *namespace); err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(1)
	}
}

func run(dir string, valueFiles []string, name, namespace string) error {
	chart, err := load(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return err
	}
	values, err := load(filepath.Join(dir, "values.yaml"))
	if err != nil {
		return err
	}
	for _, f := range valueFiles {
		over, err := load(f)
		if err != nil {
			return err
		}
		values = merge(values, over)
	}
	chartName := fmt.Sprint(chart["name"])
	paths, err := filepath.Glob(filepath.Join(dir, "templates", "*"))
	if err != nil {
		return err
	}
	sort.Strings(paths)

	root := template.New(chartName)
	funcs := sprig.TxtFuncMap()
	// Helm takes these out of sprig (a chart must not read the renderer's environment).
	delete(funcs, "env")
	delete(funcs, "expandenv")
	funcs["toYaml"] = toYaml
	funcs["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil || v == "" {
			return nil, errors.New(msg)
		}
		return v, nil
	}
	funcs["include"] = func(name string, data interface{}) (string, error) {
		var buf bytes.Buffer
		err := root.ExecuteTemplate(&buf, name, data)
		return buf.String(), err
	}
	root.Funcs(funcs).Option("missingkey=zero")
	var names []string
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		tname := filepath.ToSlash(filepath.Join(chartName, "templates", filepath.Base(p)))
		if _, err := root.New(tname).Parse(string(raw)); err != nil {
			return err
		}
		base := filepath.Base(p)
		if !strings.HasPrefix(base, "_") && (strings.HasSuffix(base, ".yaml") || strings.HasSuffix(base, ".yml")) {
			names = append(names, tname)
		}
	}
	for _, tname := range names {
		data := map[string]interface{}{
			"Values": values,
			"Release": map[string]interface{}{
				"Name": name, "Namespace": namespace, "Service": "Helm",
				"IsInstall": true, "IsUpgrade": false, "Revision": 1,
			},
			"Chart": map[string]interface{}{
				"Name": chartName, "Version": chart["version"], "AppVersion": chart["appVersion"],
			},
			"Template": map[string]interface{}{
				"Name": tname, "BasePath": filepath.ToSlash(filepath.Join(chartName, "templates")),
			},
		}
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, tname, data); err != nil {
			return err
		}
		out := strings.ReplaceAll(buf.String(), "<no value>", "")
		if strings.TrimSpace(out) == "" {
			continue
		}
		fmt.Printf("---\n# Source: %s\n%s\n", tname, strings.TrimSpace(out))
	}
	return nil
}
