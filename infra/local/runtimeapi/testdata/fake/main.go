// Command fake is a tiny Lambda runtime client for the runtimeapi tests: it
// speaks the Runtime API directly and does what each event asks.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

type event struct {
	Echo  string `json:"echo"`
	Sleep string `json:"sleep"`
	Fail  string `json:"fail"`
	Exit  bool   `json:"exit"`
	Env   string `json:"env"`
}

func main() {
	base := "http://" + os.Getenv("AWS_LAMBDA_RUNTIME_API") + "/2018-06-01/runtime"
	fmt.Println(`{"msg":"init","function":"` + os.Getenv("AWS_LAMBDA_FUNCTION_NAME") + `"}`)
	switch os.Getenv("FAKE_INIT") {
	case "crash":
		fmt.Fprintln(os.Stderr, "fake: cannot start: FAKE_SETTING is not set")
		os.Exit(3)
	case "error":
		post(base+"/init/error", `{"errorType":"Runtime.ConfigError","errorMessage":"FAKE_SETTING is not set"}`)
		os.Exit(1)
	case "hang":
		time.Sleep(time.Hour)
	}
	for {
		resp, err := http.Get(base + "/invocation/next")
		if err != nil {
			fmt.Fprintln(os.Stderr, "fake: next:", err)
			os.Exit(1)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		id := resp.Header.Get("Lambda-Runtime-Aws-Request-Id")
		var ev event
		_ = json.Unmarshal(body, &ev)
		switch {
		case ev.Exit:
			fmt.Fprintln(os.Stderr, "fake: exiting mid-invocation")
			os.Exit(2)
		case ev.Sleep != "":
			d, _ := time.ParseDuration(ev.Sleep)
			time.Sleep(d)
		}
		if ev.Fail != "" {
			post(base+"/invocation/"+id+"/error", fmt.Sprintf(`{"errorType":"errorString","errorMessage":%q}`, ev.Fail))
			continue
		}
		out, _ := json.Marshal(map[string]any{
			"echo":     ev.Echo,
			"env":      os.Getenv(ev.Env),
			"pid":      os.Getpid(),
			"deadline": resp.Header.Get("Lambda-Runtime-Deadline-Ms"),
			"arn":      resp.Header.Get("Lambda-Runtime-Invoked-Function-Arn"),
			"trace":    resp.Header.Get("Lambda-Runtime-Trace-Id"),
		})
		post(base+"/invocation/"+id+"/response", string(out))
	}
}

func post(url, body string) {
	resp, err := http.Post(url, "application/json", bytes.NewBufferString(body))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake: post:", err)
		os.Exit(1)
	}
	resp.Body.Close()
}
