<#
.SYNOPSIS
Installs, upgrades or removes azure-scheduled-events-exporter as a Windows service.

.DESCRIPTION
Run from the unpacked zip, in an elevated PowerShell (Windows PowerShell 5.1 or PowerShell 7).

Install or upgrade: copies azure-scheduled-events-exporter.exe to -InstallDir, creates the service
(automatic start, LocalSystem, restarted on failure) or points the existing one at the new binary
with the new arguments, creates %ProgramData%\azure-scheduled-events-exporter (state file and log,
readable by Administrators and SYSTEM only), opens TCP -Port inbound in Windows Firewall for
Prometheus, and starts the service. An upgrade stops the service first: a graceful stop, with the
state file written.

-Remove stops and deletes the service, the firewall rule and -InstallDir; the state file and log
in %ProgramData%\azure-scheduled-events-exporter are kept (delete that folder to forget them).

.EXAMPLE
.\install-service.ps1

.EXAMPLE
.\install-service.ps1 -Arguments '--approve', '--approve.hook=C:\ops\drain.cmd'

.EXAMPLE
.\install-service.ps1 -Remove
#>
[CmdletBinding()]
param(
    # Where the binary is installed.
    [string]$InstallDir = (Join-Path $env:ProgramFiles 'azure-scheduled-events-exporter'),
    # The agent's flags, one per element (docs/configuration.md); the service runs the binary with them.
    [string[]]$Arguments = @(),
    # The port opened in Windows Firewall: the port of --web.listen-address (default :10188).
    [ValidateRange(1, 65535)]
    [int]$Port = 10188,
    # Remove the service, the firewall rule and the binary instead.
    [switch]$Remove
)

$ErrorActionPreference = 'Stop'
$name = 'azure-scheduled-events-exporter'
$exe = Join-Path $InstallDir "$name.exe"
$dataDir = Join-Path $env:ProgramData $name

function Stop-Agent {
    $service = Get-Service -Name $name -ErrorAction SilentlyContinue
    if ($service -and $service.Status -ne 'Stopped') {
        Stop-Service -Name $name
        $service.WaitForStatus('Stopped', [TimeSpan]::FromSeconds(60))
    }
    return $service
}

if ($Remove) {
    if (Stop-Agent) {
        & sc.exe delete $name | Out-Null
        if ($LASTEXITCODE -ne 0) { throw "sc.exe delete $name failed ($LASTEXITCODE)" }
    }
    Get-NetFirewallRule -Name $name -ErrorAction SilentlyContinue | Remove-NetFirewallRule
    if (Test-Path $InstallDir) { Remove-Item -Recurse -Force $InstallDir }
    Write-Host "Removed $name. State and log kept in $dataDir."
    return
}

$source = Join-Path $PSScriptRoot "$name.exe"
if (-not (Test-Path $source)) { throw "$source not found: run this script from the unpacked zip" }

$existing = Stop-Agent
New-Item -ItemType Directory -Force -Path $InstallDir | Out-Null
Copy-Item -Force $source $exe
Copy-Item -Force (Join-Path $PSScriptRoot 'README.md'), (Join-Path $PSScriptRoot 'LICENSE') $InstallDir `
    -ErrorAction SilentlyContinue

# The state file records approvals sent: only the service and administrators may change it.
New-Item -ItemType Directory -Force -Path $dataDir | Out-Null
& icacls.exe $dataDir /inheritance:r /grant:r 'SYSTEM:(OI)(CI)F' 'Administrators:(OI)(CI)F' | Out-Null
if ($LASTEXITCODE -ne 0) { throw "icacls.exe $dataDir failed ($LASTEXITCODE)" }

# The command line the service control manager runs: the binary, its `service` subcommand and each
# flag, quoted as Windows
# programs parse it (a quote is escaped with a backslash, and backslashes before a quote are doubled).
$quoted = @('"{0}"' -f $exe, 'service') + @($Arguments | ForEach-Object {
        '"{0}"' -f (($_ -replace '(\\*)"', '$1$1\"') -replace '(\\+)$', '$1$1')
    })
$commandLine = $quoted -join ' '

if ($existing) {
    # ImagePath is the service's command line; sc.exe config would need its own quoting rules.
    Set-ItemProperty -Path "HKLM:\SYSTEM\CurrentControlSet\Services\$name" -Name ImagePath -Value $commandLine
} else {
    New-Service -Name $name -BinaryPathName $commandLine -DisplayName 'Azure Scheduled Events exporter' `
        -Description 'Turns Azure Scheduled Events into Prometheus metrics, traces and logs.' `
        -StartupType Automatic | Out-Null
}
# Restart after a crash or an exit with an error: 5 s, 5 s, then 60 s; the count resets after a day.
& sc.exe failure $name reset= 86400 actions= restart/5000/restart/5000/restart/60000 | Out-Null
if ($LASTEXITCODE -ne 0) { throw "sc.exe failure $name failed ($LASTEXITCODE)" }
& sc.exe failureflag $name 1 | Out-Null

# Prometheus scrapes /metrics on the listen port.
Get-NetFirewallRule -Name $name -ErrorAction SilentlyContinue | Remove-NetFirewallRule
New-NetFirewallRule -Name $name -DisplayName "Azure Scheduled Events exporter (TCP $Port)" `
    -Direction Inbound -Protocol TCP -LocalPort $Port -Program $exe -Action Allow | Out-Null

Start-Service -Name $name
Write-Host "$name is running: http://localhost:$Port/metrics (log: $dataDir\agent.log)"
