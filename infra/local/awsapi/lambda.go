package awsapi

import (
	"errors"
	"io"
	"net/http"
	"strings"
)

// FunctionARN is the ARN a policy names function by.
func FunctionARN(function string) string {
	return "arn:aws:lambda:" + Region + ":" + AccountID + ":function:" + function
}

// lambdaInvokePath reads the function name out of an Invoke call's path,
// /2015-03-31/functions/{name}/invocations.
func lambdaInvokePath(r *http.Request) (string, bool) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/2015-03-31/functions/")
	if !ok {
		return "", false
	}
	name, ok := strings.CutSuffix(rest, "/invocations")
	return name, ok && name != "" && !strings.Contains(name, "/")
}

// functionName is the function a FunctionName names: a name, a partial
// ARN (ACCOUNT:function:NAME) or an ARN, each perhaps with a qualifier.
func functionName(name string) string {
	if _, after, ok := strings.Cut(name, ":function:"); ok {
		name = after
	} else if strings.HasPrefix(name, "function:") {
		name = strings.TrimPrefix(name, "function:")
	}
	name, _, _ = strings.Cut(name, ":")
	return name
}

// Lambda's invocation types.
const (
	invokeSync   = "RequestResponse"
	invokeAsync  = "Event"
	invokeDryRun = "DryRun"
)

// lambda serves Invoke through Options.Invoke: synchronously, as an event
// (202, run in the background), or as a dry run (204, the permission check
// alone).
func (c *call) lambda() {
	function := functionName(c.op.target)
	if !c.allowed(need{action: "lambda:InvokeFunction", resource: FunctionARN(function)}) {
		return
	}
	kind := c.r.Header.Get("X-Amz-Invocation-Type")
	if kind == "" {
		kind = invokeSync
	}
	if kind != invokeSync && kind != invokeAsync && kind != invokeDryRun {
		c.fail(http.StatusBadRequest, "InvalidParameterValueException", "X-Amz-Invocation-Type is RequestResponse, Event or DryRun, not "+kind)
		return
	}
	if c.opts.Invoke == nil {
		c.fail(http.StatusNotFound, "ResourceNotFoundException", "Function not found: "+FunctionARN(function))
		return
	}
	switch kind {
	case invokeDryRun:
		c.w.WriteHeader(http.StatusNoContent)
		return
	case invokeAsync:
		// Lambda queues the event and answers at once; what the
		// invocation does is only logged.
		payload, caller := c.body, c.caller.function
		c.wg.Go(func() {
			if _, err := c.opts.Invoke(c.ctx, function, payload); err != nil && c.ctx.Err() == nil {
				c.log.Warn("asynchronous invocation failed", "function", caller, "invoked", function, "error", err.Error())
			}
		})
		c.w.Header().Set("X-Amzn-RequestId", randomHex(16))
		c.w.WriteHeader(http.StatusAccepted)
		return
	}
	serveInvoke(c.w, c.r, c.opts.Invoke, function, c.body)
}

// serveInvoke answers a synchronous Invoke of function with what invoke
// returns, as Lambda does: the response, ResourceNotFoundException for a
// function that does not exist, or the function's error as an Unhandled
// function error (200).
func serveInvoke(w http.ResponseWriter, r *http.Request, invoke InvokeFunc, function string, payload []byte) {
	out, err := invoke(r.Context(), function, payload)
	switch {
	case errors.Is(err, ErrNotFound):
		writeError(w, r, true, http.StatusNotFound, "ResourceNotFoundException", "Function not found: "+FunctionARN(function))
		return
	case err != nil:
		w.Header().Set("X-Amz-Function-Error", "Unhandled")
		writeJSON(w, "application/json", http.StatusOK, map[string]string{"errorMessage": err.Error(), "errorType": "error"})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Amz-Executed-Version", "$LATEST")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
}

// InvokeHandler serves Lambda's Invoke API (RequestResponse) with invoke,
// without checking who calls: the local stack's in-process handlers, which
// share its process and credentials, reach the processors through it.
func InvokeHandler(invoke InvokeFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := lambdaInvokePath(r)
		if !ok || r.Method != http.MethodPost {
			writeError(w, r, true, http.StatusBadRequest, "UnknownOperationException", r.Method+" "+r.URL.Path+" is not Lambda Invoke")
			return
		}
		payload, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			writeError(w, r, true, http.StatusRequestEntityTooLarge, "RequestTooLargeException", "cannot read the payload: "+err.Error())
			return
		}
		serveInvoke(w, r, invoke, functionName(name), payload)
	})
}
