// Package webui renders the scheduler's web page, /ui: the GPU map as
// bars of shares coloured by job, the queue with each group's reason and
// position, refused groups, recent unpairs and preemptions, one job's
// groups, and the token form. It is server-rendered HTML (html/template,
// embedded), readable without JavaScript; a small script only reloads the
// page sooner when the model changes. It knows nothing of the service:
// the service fills the view models here with what the caller's token may
// read, and this package draws them.
package webui
