package server

// The types the handlers decode request bodies into, for the tests of
// package server_test: TestOpenAPIRequestBodies compares their JSON members
// with the request bodies docs/openapi.json documents.
type (
	CreateQueueRequest = createQueueRequest
	CreateGroupRequest = createGroupRequest
	SeekGroupRequest   = seekGroupRequest
	SendRequest        = sendRequest
	SendBatchRequest   = sendBatchRequest
	ReceiveRequest     = receiveRequest
	AckRequest         = ackRequest
	NackRequest        = nackRequest
	ExtendRequest      = extendRequest
	TransactionRequest = transactionRequest
	RedriveRequest     = redriveRequest
	DiscardRequest     = discardRequest
)

// StatusWaiting is how many GET /v1/status requests (and event feeds) wait
// for a status reading, pending or in progress, of any scope.
func (s *Server) StatusWaiting() int {
	sh := s.statuses
	sh.mu.Lock()
	defer sh.mu.Unlock()
	n := 0
	for _, sc := range sh.scopes {
		for _, run := range []*statusRun{sc.running, sc.next} {
			if run != nil {
				n += run.waiters
			}
		}
	}
	return n
}
